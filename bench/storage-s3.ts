// Files on S3 against the local disk, in the same run: a 1M-line (≈280 MB)
// batch file uploaded, run on the echo model (create → completed), its
// output file downloaded; seconds for each, GET /batches/{id} latency while
// the batch runs (the HTTP thread's load: Workers read their shards from
// the bucket and upload their parts themselves), and the server's peak RSS.
// The bucket is s3rver from npm (test/helpers/s3.ts) on this same machine:
// a slow S3 (JavaScript, an MD5 of every byte, sharing the 2 cores), so the
// S3 figures bound offpeak's own cost from above.
// Usage: bun bench/storage-s3.ts [lines=1000000]
import { startS3 } from "../test/helpers/s3";
import { DEFAULT_LINES, DEFAULT_PATH, generateBatchFile } from "./gen-batch";
import { auth, percentile, startBenchServer, uploadBatchFile } from "./server";

const lines = Number(process.argv[2] ?? 1_000_000);
const input = lines === DEFAULT_LINES ? DEFAULT_PATH : `bench/data/batch-${lines}.jsonl`;
await generateBatchFile(input, lines);

interface Run {
  upload: number;
  batch: number;
  download: number;
  p99: number;
  rss: number;
  outBytes: number;
}

async function run(env: Record<string, string>): Promise<Run> {
  const server = await startBenchServer(env);
  try {
    let t = performance.now();
    const file = await uploadBatchFile(server.base, input);
    const upload = (performance.now() - t) / 1000;
    t = performance.now();
    const created = (await fetch(`${server.base}/batches`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" }),
    }).then((r) => r.json())) as { id: string };
    const latencies: number[] = [];
    let b: { status: string; output_file_id: string | null; request_counts: { completed: number } };
    for (;;) {
      const s = performance.now();
      b = (await fetch(`${server.base}/batches/${created.id}`, { headers: auth }).then((r) => r.json())) as typeof b;
      latencies.push(performance.now() - s);
      if (["completed", "failed", "expired", "cancelled"].includes(b.status)) break;
      await Bun.sleep(20);
    }
    const batch = (performance.now() - t) / 1000;
    if (b.status !== "completed" || b.request_counts.completed !== lines) throw new Error(`batch ended ${b.status}, ${b.request_counts.completed} completed`);
    t = performance.now();
    const res = await fetch(`${server.base}/files/${b.output_file_id}/content`, { headers: auth });
    let outBytes = 0;
    for await (const chunk of res.body!) outBytes += chunk.length;
    const download = (performance.now() - t) / 1000;
    latencies.sort((x, y) => x - y);
    return { upload, batch, download, p99: percentile(latencies, 99), rss: server.peakRssMb(), outBytes };
  } finally {
    await server.stop();
  }
}

const s3 = await startS3();
try {
  const disk = await run({});
  const bucket = await run({ ...s3.env, OFFPEAK_STORAGE_URL: `s3://${s3.bucket}/bench` });
  const row = (name: string, r: Run) =>
    console.log(
      `${name.padEnd(5)}: upload ${r.upload.toFixed(2)} s, batch ${r.batch.toFixed(2)} s (GET p99 ${r.p99.toFixed(1)} ms), download ${r.download.toFixed(2)} s (${(r.outBytes / 1e6).toFixed(0)} MB), peak RSS ${r.rss.toFixed(0)} MB`,
    );
  row("disk", disk);
  row("s3", bucket);
  console.log(`ratio s3/disk: upload ${(bucket.upload / disk.upload).toFixed(2)}×, batch ${(bucket.batch / disk.batch).toFixed(2)}×, download ${(bucket.download / disk.download).toFixed(2)}×`);
  if (bucket.outBytes !== disk.outBytes) {
    console.log("output sizes differ");
    process.exitCode = 1;
  }
} finally {
  await s3.stop();
}
