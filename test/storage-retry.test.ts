// Retrying bucket calls where they fail (docs/CONTRACT.md §17; src/storage/retry.ts):
// which failures are retried, the backoff (exponential, full jitter, at
// least 5 tries over about 30 s), streams that resume at the first byte not
// delivered, and the request signing that multipart uploads use
// (src/storage/bucket.ts), checked against Bun's own signatures.
import { afterEach, describe, expect, test } from "bun:test";
import { resignedUrl } from "../src/storage/bucket";
import { backoffMs, DEFAULT_POLICY, isRetryable, resumableStream, setRetryCounter, setRetryPolicy, withRetries, type StorageOp } from "../src/storage/retry";

const s3Error = (code: string) => Object.assign(new Error("an unexpected error has occurred"), { name: "S3Error", code });

afterEach(() => {
  setRetryPolicy(DEFAULT_POLICY);
  setRetryCounter(() => {});
});

/** A fake clock: sleeps advance it at once. */
function fakeTime(random = () => 0.5) {
  const clock = { now: 0, sleeps: [] as number[] };
  setRetryPolicy({
    now: () => clock.now,
    sleep: async (ms) => {
      clock.sleeps.push(ms);
      clock.now += ms;
    },
    random,
  });
  return clock;
}

describe("which failures are retried", () => {
  test("the bucket's trouble and the network's: 500 InternalError, 503 SlowDown, resets, refused connections, timeouts", () => {
    for (const code of ["InternalError", "SlowDown", "ServiceUnavailable", "RequestTimeout", "UnknownError", "ConnectionClosed", "ConnectionRefused"]) expect(isRetryable(s3Error(code))).toBe(true);
    for (const code of ["ECONNRESET", "ECONNREFUSED", "EPIPE", "ETIMEDOUT"]) expect(isRetryable(Object.assign(new TypeError(code), { code }))).toBe(true);
    expect(isRetryable(Object.assign(new Error("x"), { name: "TimeoutError" }))).toBe(true);
    for (const status of [500, 502, 503, 504, 429]) expect(isRetryable(Object.assign(new Error("x"), { status, code: `HTTP${status}` }))).toBe(true);
    expect(isRetryable(new Error("wrapped", { cause: s3Error("SlowDown") }))).toBe(true);
  });

  test("answers about the request are not: NoSuchKey, AccessDenied, 4xx, plain errors", () => {
    for (const code of ["NoSuchKey", "NoSuchUpload", "AccessDenied", "InvalidArgument", "ERR_S3_MISSING_CREDENTIALS"]) expect(isRetryable(s3Error(code))).toBe(false);
    for (const status of [400, 403, 404, 409]) expect(isRetryable(Object.assign(new Error("x"), { status, code: `HTTP${status}` }))).toBe(false);
    expect(isRetryable(new Error("a bug"))).toBe(false);
    expect(isRetryable(null)).toBe(false);
    expect(isRetryable("InternalError")).toBe(false);
  });
});

describe("backoff", () => {
  test("full jitter over an exponential ceiling: random · min(cap, base · 2^(n-1))", () => {
    const p = { baseMs: 100, capMs: 10_000 };
    expect([1, 2, 3, 4, 5, 6, 7, 8, 9].map((n) => backoffMs(n, { ...p, random: () => 0.999999 }))).toEqual([99, 199, 399, 799, 1599, 3199, 6399, 9999, 9999]);
    expect(backoffMs(5, { ...p, random: () => 0 })).toBe(0);
    expect(backoffMs(3, { ...p, random: () => 0.5 })).toBe(200);
  });

  test("a call that keeps failing is tried at least 5 times, over about 30 s, then its last failure is thrown", async () => {
    for (const r of [0.999999, 0.5, 0]) {
      const clock = fakeTime(() => r);
      let tries = 0;
      const err = await withRetries("get", async () => {
        tries++;
        throw s3Error("SlowDown");
      }).catch((e) => e);
      expect(err.code).toBe("SlowDown");
      expect(tries).toBeGreaterThanOrEqual(5);
      expect(clock.sleeps.length).toBe(tries - 1);
      // The waits of the slowest draw: ≈ 30 s or a little more (the last wait starts inside the budget).
      if (r > 0.9) {
        expect(clock.now).toBeGreaterThanOrEqual(25_000);
        expect(clock.now).toBeLessThanOrEqual(45_000);
      }
    }
  });

  test("succeeds once the bucket answers; each retry is counted for its operation", async () => {
    fakeTime();
    const counted: StorageOp[] = [];
    setRetryCounter((op) => counted.push(op));
    let tries = 0;
    const got = await withRetries("upload_part", async (attempt) => {
      tries++;
      expect(attempt).toBe(tries);
      if (tries === 1) throw s3Error("InternalError");
      if (tries === 2) throw Object.assign(new TypeError("reset"), { code: "ECONNRESET" });
      if (tries === 3) throw s3Error("SlowDown");
      return "etag";
    });
    expect(got).toBe("etag");
    expect(tries).toBe(4);
    expect(counted).toEqual(["upload_part", "upload_part", "upload_part"]);
  });

  test("a failure that is not retryable is thrown at once, with no retry counted", async () => {
    fakeTime();
    let counted = 0;
    setRetryCounter(() => counted++);
    let tries = 0;
    const err = await withRetries("stat", async () => {
      tries++;
      throw s3Error("NoSuchKey");
    }).catch((e) => e);
    expect(err.code).toBe("NoSuchKey");
    expect(tries).toBe(1);
    expect(counted).toBe(0);
  });

  test("a call that hangs is given up after its timeout and tried again", async () => {
    setRetryPolicy({ sleep: async () => {} });
    let tries = 0;
    const got = await withRetries(
      "list",
      () => {
        tries++;
        return tries < 3 ? new Promise<string>(() => {}) : Promise.resolve("page");
      },
      { timeoutMs: 20 },
    );
    expect(got).toBe("page");
    expect(tries).toBe(3);
  });

  test("maxTries: 1 (a health probe) does not retry", async () => {
    fakeTime();
    let tries = 0;
    await withRetries(
      "list",
      async () => {
        tries++;
        throw s3Error("InternalError");
      },
      { maxTries: 1 },
    ).catch(() => {});
    expect(tries).toBe(1);
  });
});

describe("resumable streams", () => {
  const data = Uint8Array.from({ length: 10_000 }, (_, i) => (i * 31) & 255);

  /** An object whose answers break: the first `breaks` opens fail after `cutAfter` bytes (or at once). */
  function flaky(breaks: number, cutAfter: number) {
    const opens: number[] = [];
    const open = (from: number, end = data.length) => {
      opens.push(from);
      const broken = opens.length <= breaks;
      let at = from;
      return new ReadableStream<Uint8Array>({
        pull(c) {
          if (broken && at - from >= cutAfter) return c.error(s3Error(cutAfter === 0 ? "InternalError" : "ConnectionClosed"));
          if (at >= end) return c.close();
          const n = Math.min(700, end - at, broken ? cutAfter - (at - from) : Infinity);
          c.enqueue(data.slice(at, at + n));
          at += n;
        },
      });
    };
    return { opens, open };
  }

  test("a body cut in the middle goes on from the first byte not delivered: the bytes are exact", async () => {
    fakeTime();
    const f = flaky(3, 2500);
    const got = new Uint8Array(await new Response(resumableStream("get", (from) => f.open(from), 0, undefined)).arrayBuffer());
    expect(Buffer.from(got).equals(Buffer.from(data))).toBe(true);
    expect(f.opens).toEqual([0, 2500, 5000, 7500]);
  });

  test("a range: starts where asked, stops at its end, resumes inside it; an error before any byte is retried too", async () => {
    fakeTime();
    const f = flaky(2, 0);
    const got = new Uint8Array(await new Response(resumableStream("range", (from) => f.open(from, 6000), 1234, 6000)).arrayBuffer());
    expect(Buffer.from(got).equals(Buffer.from(data.subarray(1234, 6000)))).toBe(true);
    expect(f.opens).toEqual([1234, 1234, 1234]);
    const g = flaky(1, 1000);
    const part = new Uint8Array(await new Response(resumableStream("range", (from) => g.open(from, 4000), 100, 4000)).arrayBuffer());
    expect(Buffer.from(part).equals(Buffer.from(data.subarray(100, 4000)))).toBe(true);
    expect(g.opens).toEqual([100, 1100]);
  });

  test("an answer that ends before the range does is read again from there, never passed on short", async () => {
    fakeTime();
    const opens: number[] = [];
    const open = (from: number) => {
      opens.push(from);
      // The first answer stops early without an error.
      const end = opens.length === 1 ? 3000 : 8000;
      return new Blob([data.slice(from, end)]).stream();
    };
    const got = new Uint8Array(await new Response(resumableStream("range", open, 0, 8000)).arrayBuffer());
    expect(got.length).toBe(8000);
    expect(Buffer.from(got).equals(Buffer.from(data.subarray(0, 8000)))).toBe(true);
    expect(opens).toEqual([0, 3000]);
  });

  test("a failure that is not retryable ends the stream with that error", async () => {
    fakeTime();
    const s = resumableStream("get", () => new ReadableStream({ pull: (c) => c.error(s3Error("NoSuchKey")) }), 0, undefined);
    const err = await new Response(s).arrayBuffer().catch((e) => e);
    expect(err.code).toBe("NoSuchKey");
  });
});

describe("signing the calls Bun's client does not make (multipart)", () => {
  test("a URL signed again without changes has Bun's own signature (path style, virtual hosts, session tokens, odd keys)", () => {
    const settings = [
      { endpoint: "http://127.0.0.1:9000", region: "us-east-1" },
      { region: "eu-west-3", sessionToken: "TOKEN/with+odd=chars" },
      { endpoint: "https://account.r2.cloudflarestorage.com" },
    ];
    for (const s of settings) {
      const client = new Bun.S3Client({ bucket: "bk", accessKeyId: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ...s });
      for (const key of ["p/x", "a b+c/ü~(1).txt", "prefix/file-abc.parts/3.12"]) {
        const bun = client.file(key).presign({ method: "GET", expiresIn: 600 });
        const mine = resignedUrl(bun, "GET", {}, "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
        expect(new URL(mine).searchParams.get("X-Amz-Signature")).toBe(new URL(bun).searchParams.get("X-Amz-Signature")!);
        // Another method and query: a different signature, the same credentials and path.
        const part = new URL(resignedUrl(bun, "PUT", { partNumber: "2", uploadId: "abc" }, "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"));
        expect(part.pathname).toBe(new URL(bun).pathname);
        expect(part.searchParams.get("partNumber")).toBe("2");
        expect(part.searchParams.get("X-Amz-Signature")).not.toBe(new URL(bun).searchParams.get("X-Amz-Signature"));
      }
    }
  });
});
