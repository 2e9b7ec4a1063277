// docs/CONTRACT.md §18: completion_window is `Nh` or `Nd` from 1h to 7d (24h the
// default, what OpenAI's SDKs send); anything else is a 400 naming
// completion_window that stores nothing; expires_at = created_at + window.
// And the CLI's --window (batches create, batch run).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type OpenAI from "openai";
import { uploadBatchFile, waitBatch } from "./helpers/batches";
import { chatLine, startTestServer, type TestServer } from "./helpers/server";
import { runCli, type CliRun as Run } from "./helpers/cli";
import { SCENARIO_MS } from "./helpers/wait";


let t: TestServer;
let client: OpenAI;
let fileId: string;
let work: string;

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "offpeak-windows-"));
  t = await startTestServer({ env: { OFFPEAK_BATCH_WORKERS: "1" } });
  client = t.sdk();
  fileId = (await uploadBatchFile(client, [chatLine("w-1"), chatLine("w-2")])).id;
});

afterAll(async () => {
  await t?.stop();
  rmSync(work, { recursive: true, force: true });
});

const post = (body: unknown) => t.api("/batches", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

async function batchCount(): Promise<number> {
  let n = 0;
  let after: string | null = null;
  for (;;) {
    const res = await t.api(`/batches?limit=100${after ? `&after=${after}` : ""}`);
    const page = (await res.json()) as { data: { id: string }[]; has_more: boolean; last_id: string | null };
    n += page.data.length;
    if (!page.has_more) return n;
    after = page.last_id;
  }
}

describe("completion_window", () => {
  test("Nh and Nd from 1h to 7d are accepted; expires_at = created_at + window", async () => {
    const hours: Record<string, number> = { "1h": 1, "2h": 2, "12h": 12, "24h": 24, "48h": 48, "167h": 167, "168h": 168, "1d": 24, "2d": 48, "6d": 144, "7d": 168 };
    for (const [w, h] of Object.entries(hours)) {
      const res = await post({ input_file_id: fileId, endpoint: "/v1/chat/completions", completion_window: w });
      const b = (await res.json()) as any;
      expect({ w, status: res.status, window: b.completion_window, expiresIn: b.expires_at - b.created_at }).toEqual({ w, status: 200, window: w, expiresIn: h * 3600 });
      // The record as stored says the same.
      const again = (await (await t.api(`/batches/${b.id}`)).json()) as any;
      expect({ w, window: again.completion_window, expires_at: again.expires_at }).toEqual({ w, window: w, expires_at: b.expires_at });
    }
  });

  test("the official SDK's 24h (the default) works, and the SDK reads the record back", async () => {
    const b = await client.batches.create({ input_file_id: fileId, endpoint: "/v1/chat/completions", completion_window: "24h" });
    expect(b.completion_window).toBe("24h");
    expect(b.expires_at! - b.created_at).toBe(24 * 3600);
    const back = await client.batches.retrieve(b.id);
    expect(back.id).toBe(b.id);
    const list = await client.batches.list({ limit: 5 });
    expect(list.data.some((x) => x.id === b.id)).toBe(true);
  });

  test("anything else → 400 invalid_value naming completion_window, and no batch is stored", async () => {
    const before = await batchCount();
    const bad: unknown[] = ["0h", "169h", "0d", "8d", "10d", "24", "", "24H", "1D", " 24h", "24h ", "-1h", "+1h", "1.5h", "1e1h", "0x10h", "001h", "024h", "01d", "1w", "1m", "60m", "1h30m", "d", "h", "1hd", "24 h", "１h", 24, null, true, ["24h"], { h: 24 }];
    for (const w of bad) {
      const res = await post({ input_file_id: fileId, endpoint: "/v1/chat/completions", completion_window: w });
      const body = (await res.json()) as any;
      expect({ w, status: res.status, type: body.error?.type, param: body.error?.param }).toEqual({ w, status: 400, type: "invalid_request_error", param: typeof w === "string" ? "completion_window" : body.error?.param });
      if (typeof w === "string") expect({ w, code: body.error.code }).toEqual({ w, code: "invalid_value" });
    }
    expect(await batchCount()).toBe(before);
  });

  test("one 'h' scales with batches.hour_seconds (tests only): 1d = 24 of them", async () => {
    const short = await startTestServer({ env: { OFFPEAK_BATCH_WORKERS: "1", OFFPEAK_BATCH_HOUR_SECONDS: "2" } });
    try {
      const sdk = short.sdk();
      const f = await uploadBatchFile(sdk, [chatLine("s-1")]);
      for (const [w, h] of [["1h", 1], ["1d", 24], ["7d", 168]] as const) {
        const b = (await (await short.api("/batches", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ input_file_id: f.id, endpoint: "/v1/chat/completions", completion_window: w }) })).json()) as any;
        expect({ w, expiresIn: b.expires_at - b.created_at }).toEqual({ w, expiresIn: h * 2 });
        await waitBatch(sdk, b.id); // ended before the server stops
      }
    } finally {
      await short.stop();
    }
  });
});

// ── the CLI's --window ─────────────────────────────────────────────────────

/** `offpeak ARGS` against the test server, run from the work directory. */
const cli = (args: string[]): Promise<Run> => runCli(args, { OFFPEAK_BASE_URL: t.base, OFFPEAK_API_KEY: t.admin }, work);

describe("the CLI's --window", () => {
  test("batches create --window 7d (and --completion-window 2d, the older spelling)", async () => {
    const r = await cli(["batches", "create", fileId, "--window", "7d"]);
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: "" });
    const b = JSON.parse(r.stdout);
    expect({ window: b.completion_window, expiresIn: b.expires_at - b.created_at }).toEqual({ window: "7d", expiresIn: 168 * 3600 });
    const old = JSON.parse((await cli(["batches", "create", fileId, "--completion-window", "2d"])).stdout);
    expect(old.completion_window).toBe("2d");
    const dflt = JSON.parse((await cli(["batches", "create", fileId])).stdout);
    expect(dflt.completion_window).toBe("24h");
  }, SCENARIO_MS);

  test("a bad --window is a usage error (exit 2) before anything is uploaded or created", async () => {
    const before = await batchCount();
    // (Input files only: the batches created above write their output files meanwhile.)
    const inputs = async () => ((await (await t.api("/files?purpose=batch")).json()) as { data: unknown[] }).data.length;
    const files = await inputs();
    const input = join(work, "in.jsonl");
    writeFileSync(input, chatLine("cli-1") + "\n");
    for (const args of [
      ["batches", "create", fileId, "--window", "8d"],
      ["batches", "create", fileId, "--window", "1w"],
      ["batches", "create", fileId, "--window", "24h", "--completion-window", "48h"],
      ["batch", "run", input, "--window", "0h"],
      ["batch", "run", input, "--window", "169h"],
    ]) {
      const r = await cli(args);
      expect({ args, code: r.code, says: /window/.test(r.stderr) }).toEqual({ args, code: 2, says: true });
    }
    expect(await batchCount()).toBe(before);
    expect(await inputs()).toBe(files);
  }, SCENARIO_MS);

  test("batch run --window 1h: the batch has that window and completes", async () => {
    const input = join(work, "run.jsonl");
    writeFileSync(input, [chatLine("r-1"), chatLine("r-2")].join("\n") + "\n");
    const r = await cli(["batch", "run", input, "--window", "1h", "--out", join(work, "run.out.jsonl"), "--quiet"]);
    expect({ code: r.code }).toEqual({ code: 0 });
    const id = /^(batch_[0-9A-Za-z]{24}) completed/.exec(r.stdout)?.[1];
    const b = (await (await t.api(`/batches/${id}`)).json()) as any;
    expect({ window: b.completion_window, expiresIn: b.expires_at - b.created_at, status: b.status }).toEqual({ window: "1h", expiresIn: 3600, status: "completed" });
  }, SCENARIO_MS);
});
