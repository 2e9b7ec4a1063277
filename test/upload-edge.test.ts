// upload edge cases that must be a clear 4xx and leave nothing stored (SPEC §4, §10).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { chatLine, startTestServer, type TestServer } from "./helpers/server";

let t: TestServer;
beforeAll(async () => {
  t = await startTestServer({ env: { OFFPEAK_BATCH_WORKERS: "1" } });
});
afterAll(async () => {
  await t.stop();
});

const B = "----reviewboundary";
function multipart(parts: { headers: string; body: string }[]): string {
  return parts.map((p) => `--${B}\r\n${p.headers}\r\n\r\n${p.body}\r\n`).join("") + `--${B}--\r\n`;
}
const post = (body: string) => t.api("/files", { method: "POST", headers: { "content-type": `multipart/form-data; boundary=${B}` }, body });
const storedFiles = () => readdirSync(join(t.dataDir, "files")).length + readdirSync(join(t.dataDir, "tmp")).length;

describe("upload", () => {
  test("purpose given twice (non-batch before the file, batch after) is a 4xx, not a 500", async () => {
    const before = storedFiles();
    const res = await post(
      multipart([
        { headers: 'Content-Disposition: form-data; name="purpose"', body: "fine-tune" },
        { headers: 'Content-Disposition: form-data; name="file"; filename="a.jsonl"', body: "not json at all\n" },
        { headers: 'Content-Disposition: form-data; name="purpose"', body: "batch" },
      ]),
    );
    const body = await res.text();
    expect({ status: res.status, body }).toMatchObject({ status: 400 });
    expect(storedFiles()).toBe(before);
  });

  test("a malformed RFC 5987 filename* is a 4xx, not a 500", async () => {
    const res = await post(
      multipart([
        { headers: 'Content-Disposition: form-data; name="purpose"', body: "batch" },
        { headers: "Content-Disposition: form-data; name=\"file\"; filename*=UTF-8''bad%E0%A4%A.jsonl", body: chatLine("x") + "\n" },
      ]),
    );
    const body = await res.text();
    expect({ status: res.status, body }).toMatchObject({ status: 400 });
  });
});
