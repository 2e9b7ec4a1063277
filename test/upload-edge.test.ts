// upload edge cases that must be a clear 4xx and leave nothing stored (docs/CONTRACT.md §4, §10).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { toFile } from "openai";
import { chatLine, startTestServer, storedBlobs, type TestServer } from "./helpers/server";

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
const storedFiles = () => storedBlobs(t);

describe("upload", () => {
  test("purpose given twice (non-batch before the file, batch after) is a 4xx, not a 500", async () => {
    const before = await storedFiles();
    const res = await post(
      multipart([
        { headers: 'Content-Disposition: form-data; name="purpose"', body: "fine-tune" },
        { headers: 'Content-Disposition: form-data; name="file"; filename="a.jsonl"', body: "not json at all\n" },
        { headers: 'Content-Disposition: form-data; name="purpose"', body: "batch" },
      ]),
    );
    const body = await res.text();
    expect({ status: res.status, body }).toMatchObject({ status: 400 });
    expect(await storedFiles()).toEqual(before);
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

describe("filenames", () => {
  const download = (id: string) => t.api(`/files/${id}/content`);

  test("non-ASCII, quote and control characters: kept in the record, downloadable with an RFC 6266 Content-Disposition", async () => {
    const client = t.sdk();
    for (const name of ["résumé—2024.txt", "日本語.txt", 'a"b.txt', "new\nline.txt", "ctl\x01\x7f.txt", "plain.txt"]) {
      // The SDK (like browsers) writes ", CR and LF in a multipart filename as %22, %0D, %0A.
      const created = await client.files.create({ file: await toFile(Buffer.from("hi\n"), name), purpose: "user_data" });
      expect(created.filename).toBe(name);
      const res = await download(created.id);
      expect(res.status).toBe(200);
      expect(await res.text()).toBe("hi\n");
      const cd = res.headers.get("content-disposition")!;
      // The fallback is printable ASCII only; the exact name rides in filename* when they differ.
      expect(/^attachment; filename="[\x20-\x7e]*"/.test(cd)).toBe(true);
      const star = /filename\*=UTF-8''([^;]+)$/.exec(cd)?.[1];
      expect(star ? decodeURIComponent(star) : /filename="([^"]*)"/.exec(cd)![1]).toBe(name);
      // And through the SDK, which checks the response too.
      expect(await (await client.files.content(created.id)).text()).toBe("hi\n");
    }
  });

  test("a filename over 1024 characters is refused, nothing stored", async () => {
    const before = await storedFiles();
    const res = await post(
      multipart([
        { headers: 'Content-Disposition: form-data; name="purpose"', body: "user_data" },
        { headers: `Content-Disposition: form-data; name="file"; filename="${"n".repeat(1025)}.txt"`, body: "hi\n" },
      ]),
    );
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error).toMatchObject({ code: "invalid_value", param: "file" });
    expect(await storedFiles()).toEqual(before);
    const ok = await post(
      multipart([
        { headers: 'Content-Disposition: form-data; name="purpose"', body: "user_data" },
        { headers: `Content-Disposition: form-data; name="file"; filename="${"n".repeat(1020)}.txt"`, body: "hi\n" },
      ]),
    );
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as any).filename).toBe(`${"n".repeat(1020)}.txt`);
  });
});
