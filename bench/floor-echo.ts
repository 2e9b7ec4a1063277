// The raw streaming floor for a batch on offpeak-echo: one thread, no server,
// no database. Streams the input, decodes whole chunks, and for each line
// does parse → echo → stringify → write. The batch benchmark compares
// offpeak's create → completed time against this, measured in the same run.
import { closeSync, openSync, writeSync } from "node:fs";
import { readLines } from "../src/jsonl/lineReader";
import { echoCompletion } from "../src/inference/builtin/echo";
import { IdStream } from "../src/ids";

export async function runFloor(input: string, output: string): Promise<{ seconds: number; lines: number }> {
  const ids = new IdStream();
  const fd = openSync(output, "w");
  const t0 = performance.now();
  let lines = 0;
  for await (const batch of readLines(Bun.file(input).stream())) {
    let out = "";
    for (const { text } of batch) {
      if (!text) continue;
      const req = JSON.parse(text);
      const body = echoCompletion(req.body, ids.next("chatcmpl-"), Math.floor(Date.now() / 1000));
      out += JSON.stringify({ id: ids.next("batch_req_"), custom_id: req.custom_id, response: { status_code: 200, request_id: ids.next("req_"), body }, error: null }) + "\n";
      lines++;
    }
    writeSync(fd, out);
  }
  closeSync(fd);
  return { seconds: (performance.now() - t0) / 1000, lines };
}

if (import.meta.main) {
  const input = process.argv[2] ?? "bench/data/batch-1m.jsonl";
  const r = await runFloor(input, "/tmp/offpeak-floor-out.jsonl");
  console.log(`floor: ${r.lines} lines in ${r.seconds.toFixed(2)} s (${Math.round(r.lines / r.seconds)} lines/s)`);
}
