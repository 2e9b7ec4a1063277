// Where webhooks may go (docs/CONTRACT.md §16): internal addresses in any spelling are
// refused at creation and again when a delivery connects, to the address
// actually dialled; redirects are not followed; delivery records hold a
// status code or a coarse class, never the receiver's body or an error's text.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { ConfigError, resolveConfig } from "../src/config";
import { classify, ipBytes } from "../src/net/addresses";
import { checkTarget, parseAllowedHosts, type Resolver } from "../src/webhooks/egress";
import { failure, postWebhook } from "../src/webhooks/post";
import { chatReq, createBatch, waitBatch } from "./helpers/batches";
import { eventually, expectError, json } from "./helpers/inference";
import { freshDataDir, startTestServer, type TestServer } from "./helpers/server";

/** The class of the host of `url`, after the URL parser has read it as offpeak's does. */
const classOfUrl = (url: string) => {
  const bytes = ipBytes(new URL(url).hostname);
  if (!bytes) throw new Error(`${url}: not an IP literal`);
  return classify(bytes);
};

/** A resolver that answers from a table (and counts its calls); names not in it fail as getaddrinfo does. */
function fakeResolver(table: Record<string, string[] | (() => string[])>) {
  const calls: string[] = [];
  const resolve: Resolver = async (host) => {
    calls.push(host);
    const a = table[host];
    if (!a) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: "ENOTFOUND" });
    return (typeof a === "function" ? a() : a).map((address) => ({ address, family: address.includes(":") ? 6 : 4 }));
  };
  return { resolve, calls };
}
const noResolver: Resolver = async (host) => {
  throw new Error(`resolver asked about ${host}`);
};

describe("address classes", () => {
  test("every spelling of loopback, unspecified, link-local (metadata), private and multicast is internal", () => {
    const cases: [string, string][] = [
      ["http://127.0.0.1/", "loopback"],
      ["http://127.255.255.254/", "loopback"],
      ["http://0x7f000001/", "loopback"],
      ["http://2130706433/", "loopback"],
      ["http://0177.0.0.1/", "loopback"],
      ["http://127.1/", "loopback"],
      ["http://0x7f.1/", "loopback"],
      ["http://%31%32%37.0.0.1/", "loopback"],
      ["http://[::1]/", "loopback"],
      ["http://[0:0:0:0:0:0:0:1]/", "loopback"],
      ["http://[::ffff:127.0.0.1]/", "loopback"], // IPv4-mapped
      ["http://[0:0:0:0:0:ffff:7f00:1]/", "loopback"],
      ["http://[::127.0.0.1]/", "loopback"], // IPv4-compatible
      ["http://[::ffff:0:127.0.0.1]/", "loopback"], // IPv4-translated
      ["http://[64:ff9b::127.0.0.1]/", "loopback"], // NAT64
      ["http://[2002:7f00:1::]/", "loopback"], // 6to4
      ["http://0.0.0.0/", "unspecified"],
      ["http://0/", "unspecified"],
      ["http://[::]/", "unspecified"],
      ["http://169.254.169.254/", "link-local"],
      ["http://[::ffff:169.254.169.254]/", "link-local"],
      ["http://[::ffff:a9fe:a9fe]/", "link-local"],
      ["http://[fe80::1]/", "link-local"],
      ["http://[febf::1]/", "link-local"],
      ["http://10.0.0.1/", "private"],
      ["http://10.255.255.255/", "private"],
      ["http://172.16.0.1/", "private"],
      ["http://172.31.255.255/", "private"],
      ["http://192.168.1.1/", "private"],
      ["http://100.64.0.1/", "private"],
      ["http://100.127.255.255/", "private"],
      ["http://[fd00:ec2::254]/", "private"], // AWS's metadata over IPv6
      ["http://[fc00::1]/", "private"],
      ["http://[::ffff:10.1.2.3]/", "private"],
      ["http://224.0.0.1/", "multicast"],
      ["http://239.255.255.250/", "multicast"],
      ["http://[ff02::1]/", "multicast"],
      ["http://255.255.255.255/", "reserved"],
    ];
    for (const [url, cls] of cases) expect([url, classOfUrl(url)]).toEqual([url, cls]);
  });

  test("the neighbours of those ranges are public", () => {
    for (const url of [
      "http://8.8.8.8/",
      "http://1.1.1.1/",
      "http://9.255.255.255/",
      "http://11.0.0.0/",
      "http://172.15.255.255/",
      "http://172.32.0.0/",
      "http://192.167.255.255/",
      "http://192.169.0.0/",
      "http://100.63.255.255/",
      "http://100.128.0.0/",
      "http://169.253.255.255/",
      "http://169.255.0.0/",
      "http://126.255.255.255/",
      "http://128.0.0.0/",
      "http://223.255.255.255/",
      "http://[2606:4700:4700::1111]/",
      "http://[::ffff:8.8.8.8]/",
      "http://[2002:808:808::]/",
      "http://[fbff:ffff::1]/",
      "http://[fe00::1]/",
    ])
      expect([url, classOfUrl(url)]).toEqual([url, null]);
  });

  test("ipBytes reads IPv4, IPv6 with :: and a dotted tail, brackets; not names", () => {
    expect([...ipBytes("10.1.2.3")!]).toEqual([10, 1, 2, 3]);
    expect([...ipBytes("[::ffff:127.0.0.1]")!]).toEqual([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1]);
    expect([...ipBytes("fd00:ec2::254")!]).toEqual([0xfd, 0, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54]);
    expect([...ipBytes("1::")!]).toEqual([0, 1, ...new Array(14).fill(0)]);
    expect(ipBytes("localhost")).toBeNull();
    expect(ipBytes("127.1")).toBeNull(); // the URL parser spells it out first
  });
});

describe("allowed hosts", () => {
  test("names, *.names, IPs and CIDRs are read; anything else stops the start with the entry named", () => {
    const p = parseAllowedHosts(["Hooks.Internal.", "*.corp.example", "127.0.0.1", "10.0.0.0/8", "[::1]", "fd00::/8"]);
    expect([...p.names]).toEqual(["hooks.internal"]);
    expect(p.suffixes).toEqual([".corp.example"]);
    expect(p.ranges.map((r) => [r.bytes.length, r.bits])).toEqual([
      [4, 32],
      [4, 8],
      [16, 128],
      [16, 8],
    ]);
    for (const bad of ["10.0.0.0/33", "::1/129", "10.0.0.0/x", "http://x", "a b", "*", "host:80", "x/8"]) expect(() => parseAllowedHosts([bad])).toThrow(bad);
  });

  test("config: OFFPEAK_WEBHOOK_ALLOWED_HOSTS (comma-separated) wins over webhooks.allowed_hosts; a bad entry is a ConfigError; the default opens nothing", async () => {
    expect(resolveConfig([], {}).webhookAllowedHosts).toEqual([]);
    expect(resolveConfig([], { OFFPEAK_WEBHOOK_ALLOWED_HOSTS: " 127.0.0.1, hooks.internal ,,10.0.0.0/8 " }).webhookAllowedHosts).toEqual(["127.0.0.1", "hooks.internal", "10.0.0.0/8"]);
    const dir = freshDataDir();
    try {
      const file = `${dir}/c.json`;
      await Bun.write(file, JSON.stringify({ webhooks: { allowed_hosts: ["192.168.0.0/16"] } }));
      expect(resolveConfig(["--config", file], {}).webhookAllowedHosts).toEqual(["192.168.0.0/16"]);
      expect(resolveConfig(["--config", file], { OFFPEAK_WEBHOOK_ALLOWED_HOSTS: "10.0.0.1" }).webhookAllowedHosts).toEqual(["10.0.0.1"]);
      await Bun.write(file, JSON.stringify({ webhooks: { allowed_hosts: ["10.0.0.0/40"] } }));
      expect(() => resolveConfig(["--config", file], {})).toThrow(ConfigError);
      expect(() => resolveConfig([], { OFFPEAK_WEBHOOK_ALLOWED_HOSTS: "ok.example,not a host" })).toThrow(/webhooks\.allowed_hosts: "not a host"/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("checkTarget", () => {
  const none = parseAllowedHosts([]);

  test("IP literals and localhost names are judged without asking DNS", async () => {
    expect(await checkTarget("127.0.0.1", none, noResolver)).toMatchObject({ ok: false, reason: "not_allowed", class: "loopback" });
    expect(await checkTarget("[::1]", none, noResolver)).toMatchObject({ ok: false, class: "loopback" });
    for (const name of ["localhost", "LOCALHOST.", "foo.localhost", "a.b.localhost"])
      expect([name, await checkTarget(name, none, noResolver)]).toEqual([name, { ok: false, reason: "not_allowed", class: "loopback", address: "127.0.0.1" }]);
    expect(await checkTarget("93.184.215.14", none, noResolver)).toEqual({ ok: true, address: "93.184.215.14", family: 4 });
  });

  test("a name is judged by every address it resolves to", async () => {
    const { resolve } = fakeResolver({
      "public.example": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
      "mixed.example": ["93.184.215.14", "10.0.0.5"],
      "metadata.example": ["169.254.169.254"],
      "v6meta.example": ["fd00:ec2::254"],
      "mapped.example": ["::ffff:127.0.0.1"],
    });
    expect(await checkTarget("public.example", none, resolve)).toEqual({ ok: true, address: "93.184.215.14", family: 4 });
    expect(await checkTarget("mixed.example", none, resolve)).toEqual({ ok: false, reason: "not_allowed", class: "private", address: "10.0.0.5" });
    expect(await checkTarget("metadata.example", none, resolve)).toMatchObject({ ok: false, class: "link-local" });
    expect(await checkTarget("v6meta.example", none, resolve)).toMatchObject({ ok: false, class: "private" });
    expect(await checkTarget("mapped.example", none, resolve)).toMatchObject({ ok: false, class: "loopback" });
    expect(await checkTarget("nowhere.example", none, resolve)).toEqual({ ok: false, reason: "dns_failed", code: "ENOTFOUND" });
  });

  test("each check resolves again: a name rebound to loopback after a public answer is refused", async () => {
    let n = 0;
    const { resolve, calls } = fakeResolver({ "rebind.example": () => (n++ === 0 ? ["93.184.215.14"] : ["127.0.0.1"]) });
    expect((await checkTarget("rebind.example", none, resolve)).ok).toBe(true);
    expect(await checkTarget("rebind.example", none, resolve)).toMatchObject({ ok: false, class: "loopback" });
    expect(calls).toEqual(["rebind.example", "rebind.example"]);
  });

  test("allowed_hosts: a name opens whatever it resolves to; a range opens its addresses (mapped IPv6 too), nothing more", async () => {
    const { resolve } = fakeResolver({
      "hooks.internal": ["10.0.0.5"],
      "other.internal": ["10.0.0.5"],
      "a.corp.example": ["192.168.1.9"],
      "corp.example": ["192.168.1.9"],
      "lo.example": ["127.0.0.1"],
      "lo6.example": ["127.0.0.1", "::1"],
    });
    const p = parseAllowedHosts(["hooks.internal", "*.corp.example", "127.0.0.1"]);
    expect((await checkTarget("hooks.internal", p, resolve)).ok).toBe(true);
    expect((await checkTarget("HOOKS.internal.", p, resolve)).ok).toBe(true);
    expect((await checkTarget("other.internal", p, resolve)).ok).toBe(false);
    expect((await checkTarget("a.corp.example", p, resolve)).ok).toBe(true);
    expect((await checkTarget("corp.example", p, resolve)).ok).toBe(false);
    expect((await checkTarget("127.0.0.1", p, resolve)).ok).toBe(true);
    expect((await checkTarget("[::ffff:127.0.0.1]", p, resolve)).ok).toBe(true);
    expect((await checkTarget("lo.example", p, resolve)).ok).toBe(true);
    expect(await checkTarget("lo6.example", p, resolve)).toMatchObject({ ok: false, address: "::1" });
    expect((await checkTarget("127.0.0.2", p, resolve)).ok).toBe(false);
    // localhost is 127.0.0.1 and ::1: 127.0.0.1 alone does not open it; the name does.
    expect((await checkTarget("localhost", p, noResolver)).ok).toBe(false);
    expect((await checkTarget("localhost", parseAllowedHosts(["localhost"]), noResolver)).ok).toBe(true);
  });
});

/** A receiver on loopback: records requests; `answer` makes each response. */
function receiver(answer: (req: Request) => Response | Promise<Response> = () => new Response("ok"), tls?: { cert: string; key: string }) {
  const got: { host: string | null; body: string; url: string }[] = [];
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    tls,
    fetch: async (req) => {
      got.push({ host: req.headers.get("host"), body: await req.text(), url: req.url });
      return answer(req);
    },
  });
  return { got, port: server.port!, stop: () => server.stop(true) };
}

/** A certificate for the name hooks.test only (no IP), valid 2020–2120. */
const CERT = `-----BEGIN CERTIFICATE-----
MIIBZTCCAQqgAwIBAgIBATAKBggqhkjOPQQDAjAVMRMwEQYDVQQDDApob29rcy50
ZXN0MCAXDTIwMDEwMTAwMDAwMFoYDzIxMjAwMTAxMDAwMDAwWjAVMRMwEQYDVQQD
DApob29rcy50ZXN0MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE0LG0k8q8Uqew
fhIe+Me/xpI5bx/jbnV3ii5Yq1H4YwdaFOXFCVe5dvRiMY3e/Z7Fp9/ltp+itauU
F2h7xuX026NJMEcwFQYDVR0RBA4wDIIKaG9va3MudGVzdDAPBgNVHRMBAf8EBTAD
AQH/MB0GA1UdDgQWBBQVbCo98YaHQ3cFpO6G6ePx4WHMwjAKBggqhkjOPQQDAgNJ
ADBGAiEA2CRTBWX465DT017qIam9ZP1iWj04GOabSXPL/8gidDcCIQDxMcxv3wyh
4Kq9PYpRm0OCJvdJYZW8Q4JoHQrAm5FGCw==
-----END CERTIFICATE-----
`;
const KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg3TVFiofhnJE0bVHP
ooV3G+d0vfv2QJx2CWYLrJ3/2zihRANCAATQsbSTyrxSp7B+Eh74x7/GkjlvH+Nu
dXeKLlirUfhjB1oU5cUJV7l29GIxjd79nsWn3+W2n6K1q5QXaHvG5fTb
-----END PRIVATE KEY-----
`;

describe("postWebhook", () => {
  const headers = { "content-type": "application/json" };

  test("dials the address it checked, with the endpoint's Host; resolves once per attempt", async () => {
    const rx = receiver();
    try {
      const { resolve, calls } = fakeResolver({ "hooks.test": ["127.0.0.1"] });
      const policy = parseAllowedHosts(["hooks.test"]);
      const res = await postWebhook(`http://hooks.test:${rx.port}/in?token=abc#frag`, headers, "{}", policy, { timeoutMs: 5000, resolve });
      expect(res).toEqual({ statusCode: 200, error: null });
      expect(rx.got.map((g) => [g.host, new URL(g.url).pathname + new URL(g.url).search])).toEqual([[`hooks.test:${rx.port}`, "/in?token=abc"]]);
      expect(calls).toEqual(["hooks.test"]);
    } finally {
      rx.stop();
    }
  });

  test("https: the endpoint's name is the TLS server name (the certificate is checked against it), though the socket goes to the IP", async () => {
    const rx = receiver(undefined, { cert: CERT, key: KEY });
    try {
      const { resolve } = fakeResolver({ "hooks.test": ["127.0.0.1"], "wrong.test": ["127.0.0.1"] });
      const policy = parseAllowedHosts(["hooks.test", "wrong.test", "127.0.0.1"]);
      const ok = await postWebhook(`https://hooks.test:${rx.port}/in`, headers, "{}", policy, { timeoutMs: 5000, resolve, ca: CERT });
      expect(ok).toEqual({ statusCode: 200, error: null });
      expect(rx.got[0]!.host).toBe(`hooks.test:${rx.port}`);
      // A certificate for another name, or one nobody vouches for: tls_error.
      expect(await postWebhook(`https://wrong.test:${rx.port}/in`, headers, "{}", policy, { timeoutMs: 5000, resolve, ca: CERT })).toMatchObject({ statusCode: null, error: "tls_error" });
      expect(await postWebhook(`https://hooks.test:${rx.port}/in`, headers, "{}", policy, { timeoutMs: 5000, resolve })).toMatchObject({ statusCode: null, error: "tls_error" });
      expect(rx.got).toHaveLength(1);
    } finally {
      rx.stop();
    }
  });

  test("a name that resolves to loopback now is not dialled (target_not_allowed); nor is an unresolvable one (dns_failed)", async () => {
    const rx = receiver();
    try {
      const { resolve } = fakeResolver({ "rebound.example": ["127.0.0.1"] });
      const none = parseAllowedHosts([]);
      expect(await postWebhook(`http://rebound.example:${rx.port}/`, headers, "{}", none, { timeoutMs: 5000, resolve })).toEqual({ statusCode: null, error: "target_not_allowed", detail: "loopback" });
      expect(await postWebhook(`http://gone.example:${rx.port}/`, headers, "{}", none, { timeoutMs: 5000, resolve })).toEqual({ statusCode: null, error: "dns_failed", detail: "ENOTFOUND" });
      expect(rx.got).toHaveLength(0);
    } finally {
      rx.stop();
    }
  });

  test("redirects are not followed; a non-2xx is `HTTP <status>` and its body is not kept", async () => {
    const target = receiver();
    const rx = receiver((req) =>
      new URL(req.url).pathname === "/moved"
        ? new Response("see other secret-body-1", { status: 307, headers: { location: `http://127.0.0.1:${target.port}/stolen` } })
        : new Response("secret-body-2", { status: 500 }),
    );
    try {
      const policy = parseAllowedHosts(["127.0.0.1"]);
      expect(await postWebhook(`http://127.0.0.1:${rx.port}/moved`, headers, "{}", policy, { timeoutMs: 5000 })).toEqual({ statusCode: 307, error: "HTTP 307" });
      expect(await postWebhook(`http://127.0.0.1:${rx.port}/fail`, headers, "{}", policy, { timeoutMs: 5000 })).toEqual({ statusCode: 500, error: "HTTP 500" });
      await Bun.sleep(100);
      expect(target.got).toHaveLength(0);
    } finally {
      rx.stop();
      target.stop();
    }
  });

  test("timeouts (of the answer or of DNS) and refused connections get their class", async () => {
    const slow = receiver(async () => {
      await Bun.sleep(2000);
      return new Response("late");
    });
    try {
      const policy = parseAllowedHosts(["127.0.0.1"]);
      expect(await postWebhook(`http://127.0.0.1:${slow.port}/`, headers, "{}", policy, { timeoutMs: 200 })).toMatchObject({ statusCode: null, error: "timeout" });
      const hang: Resolver = () => new Promise(() => {});
      expect(await postWebhook(`http://slow-dns.example/`, headers, "{}", policy, { timeoutMs: 200, resolve: hang })).toMatchObject({ statusCode: null, error: "timeout" });
    } finally {
      slow.stop();
    }
    const closed = receiver();
    closed.stop();
    expect(await postWebhook(`http://127.0.0.1:${closed.port}/`, headers, "{}", parseAllowedHosts(["127.0.0.1"]), { timeoutMs: 5000 })).toMatchObject({
      statusCode: null,
      error: "connect_failed",
    });
  });

  test("failure() maps error codes to classes", () => {
    expect(failure(Object.assign(new Error("x"), { name: "TimeoutError" })).error).toBe("timeout");
    expect(failure(Object.assign(new Error("x"), { code: "ECONNREFUSED" })).error).toBe("connect_failed");
    expect(failure(Object.assign(new Error("x"), { code: "ECONNRESET" })).error).toBe("connect_failed");
    for (const code of ["DEPTH_ZERO_SELF_SIGNED_CERT", "ERR_TLS_CERT_ALTNAME_INVALID", "CERT_HAS_EXPIRED", "UNABLE_TO_VERIFY_LEAF_SIGNATURE", "EPROTO"])
      expect([code, failure(Object.assign(new Error("x"), { code })).error]).toEqual([code, "tls_error"]);
    expect(failure("weird").error).toBe("connect_failed");
  });
});

// ---- End to end: a real server on port 0 ----

async function createEndpoint(t: TestServer, body: Record<string, unknown>) {
  return t.api("/webhook_endpoints", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
}
const deliveries = async (t: TestServer, id: string) => (await json(await t.api(`/webhook_endpoints/${id}/deliveries`))).data as any[];

describe("a server with the default policy", () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer({ env: { OFFPEAK_WEBHOOK_RETRY_BASE_MS: "100" } });
  });
  afterAll(() => t?.stop());

  test("refuses internal targets at creation (400 webhook_url_not_allowed, param url) and stores nothing", async () => {
    const refused = [
      "http://127.0.0.1:9/hook",
      "http://0x7f000001/hook",
      "http://2130706433/hook",
      "http://0177.0.0.1/hook",
      "http://127.1/hook",
      "https://[::1]/hook",
      "http://[::ffff:127.0.0.1]/hook",
      "http://[::127.0.0.1]/hook",
      "http://0.0.0.0:8080/hook",
      "http://localhost:8080/hook",
      "http://LocalHost./hook",
      "http://evil.localhost/hook",
      "http://169.254.169.254/latest/meta-data/",
      "http://[fd00:ec2::254]/latest/meta-data/",
      "http://10.0.0.1/hook",
      "http://172.16.5.4/hook",
      "http://192.168.0.1/hook",
      "http://100.64.0.1/hook",
      "http://[fe80::1]/hook",
      "http://[fc00::1]/hook",
      "http://224.0.0.1/hook",
    ];
    for (const url of refused) {
      const res = await createEndpoint(t, { url });
      expect([url, res.status]).toEqual([url, 400]);
      await expectError(res, 400, { code: "webhook_url_not_allowed", param: "url", message: /webhooks\.allowed_hosts/ });
    }
    expect((await json(await t.api("/webhook_endpoints"))).data).toEqual([]);
    // A public address, and a name that does not resolve (yet), are accepted: each delivery checks again.
    for (const url of ["http://93.184.215.14/hook", "https://example.invalid/x"]) {
      const ok = await json(await createEndpoint(t, { url }));
      expect(ok.url).toBe(url);
      await t.api(`/webhook_endpoints/${ok.id}`, { method: "DELETE" });
    }
  });
});

test("opened at creation, closed later: deliveries to loopback (by IP or by name) are refused when they connect, and recorded as target_not_allowed", async () => {
  const dataDir = freshDataDir();
  const rx = receiver();
  let s: TestServer | null = await startTestServer({ dataDir, env: { OFFPEAK_WEBHOOK_RETRY_BASE_MS: "100", OFFPEAK_WEBHOOK_ALLOWED_HOSTS: "127.0.0.1,localhost" } });
  try {
    const byIp = await json(await createEndpoint(s, { url: `http://127.0.0.1:${rx.port}/hook` }));
    const byName = await json(await createEndpoint(s, { url: `http://localhost:${rx.port}/hook` }));
    expect(byName.url).toBe(`http://localhost:${rx.port}/hook`);
    await s.stop();
    // The operator takes the opening back: the stored endpoints are checked again at every delivery.
    s = await startTestServer({ dataDir, env: { OFFPEAK_WEBHOOK_RETRY_BASE_MS: "100" } });
    const c = s.sdk();
    const { batch } = await createBatch(c, [chatReq("e1", "egress")]);
    await waitBatch(c, batch.id);
    for (const ep of [byIp, byName]) {
      const d = (await eventually(async () => {
        const list = await deliveries(s!, ep.id);
        return list.length >= 2 ? list : undefined;
      }, "two refused attempts", 10_000, 50))!;
      for (const a of d) expect(a).toMatchObject({ status_code: null, error: "target_not_allowed" });
    }
    expect(rx.got).toHaveLength(0);
  } finally {
    await s?.stop();
    rx.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

describe("a server that opens loopback", () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer({ env: { OFFPEAK_WEBHOOK_RETRY_BASE_MS: "100", OFFPEAK_WEBHOOK_ALLOWED_HOSTS: "127.0.0.1,localhost" } });
  });
  afterAll(() => t?.stop());

  test("delivery records: a redirect is a failed attempt with its status (not followed), a TLS failure or a closed port a coarse class; no body or error text", async () => {
    const stolen = receiver();
    const redirecting = receiver(() => new Response("receiver-secret-body", { status: 302, headers: { location: `http://127.0.0.1:${stolen.port}/stolen` } }));
    const failing = receiver(() => new Response("another-secret-body", { status: 503 }));
    const tlsRx = receiver(undefined, { cert: CERT, key: KEY });
    const closed = receiver();
    closed.stop();
    const named = receiver();
    try {
      const ep = {
        redirect: await json(await createEndpoint(t, { url: `http://127.0.0.1:${redirecting.port}/hook` })),
        failing: await json(await createEndpoint(t, { url: `http://127.0.0.1:${failing.port}/hook` })),
        tls: await json(await createEndpoint(t, { url: `https://127.0.0.1:${tlsRx.port}/hook` })),
        closed: await json(await createEndpoint(t, { url: `http://127.0.0.1:${closed.port}/hook` })),
        named: await json(await createEndpoint(t, { url: `http://localhost:${named.port}/hook` })),
      };
      const c = t.sdk();
      const { batch } = await createBatch(c, [chatReq("e2", "egress")]);
      await waitBatch(c, batch.id);
      const first = async (id: string) => (await eventually(async () => (await deliveries(t, id)).at(-1), "a delivery attempt", 10_000, 50)) as any;
      expect(await first(ep.redirect.id)).toMatchObject({ attempt: 1, status_code: 302, error: "HTTP 302" });
      expect(await first(ep.failing.id)).toMatchObject({ attempt: 1, status_code: 503, error: "HTTP 503" });
      expect(await first(ep.tls.id)).toMatchObject({ attempt: 1, status_code: null, error: "tls_error" });
      expect(await first(ep.closed.id)).toMatchObject({ attempt: 1, status_code: null, error: "connect_failed" });
      // By name: dialled at 127.0.0.1, with the name in Host.
      expect(await first(ep.named.id)).toMatchObject({ attempt: 1, status_code: 200, error: null });
      expect(named.got.map((g) => g.host)).toEqual([`localhost:${named.port}`]);
      expect(redirecting.got.length).toBeGreaterThanOrEqual(1);
      await Bun.sleep(300);
      expect(stolen.got).toHaveLength(0);
      const all = JSON.stringify(await Promise.all(Object.values(ep).map((e) => deliveries(t, e.id))));
      for (const leak of ["secret-body", "127.0.0.1", "localhost", "ECONNREFUSED", "Unable to connect", "certificate", "fetch"]) expect([leak, all.includes(leak)]).toEqual([leak, false]);
      for (const e of Object.values(ep)) await t.api(`/webhook_endpoints/${e.id}`, { method: "DELETE" });
    } finally {
      for (const r of [stolen, redirecting, failing, tlsRx, named]) r.stop();
    }
  });
});
