// One model, many engines (docs/CONTRACT.md §21): an interactive request
// whose replica refuses the connection goes to another replica of the
// model, and the client sees one ordinary answer; the refusals count
// against the dead replica (its breaker opens, GET /upstreams shows it).
// With every replica down the answer is the error it always was. On the
// main thread and on front threads (src/http/front), which ask the main
// thread for the other replica. A failure after which the engine may have
// the request (a reset, a timeout) is never sent again.
//
// The prompts are chosen to have the dead replica first in their ranking
// (src/inference/replicas/pick.ts homeOf, from the replicas' ids), so each
// of them is refused there until its breaker opens: without the retry,
// those answer 502.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { homeOf, prefixKey, seedOf, type ReplicaView } from "../src/inference/replicas/pick";
import { newReplicaCells } from "../src/inference/replicas/cells";
import { CallFailure, neverSent } from "../src/inference/upstream/fate";
import { UpstreamConnectionError } from "../src/inference/upstream/httpClient";
import { fixedLatencyShape, startEngineReplicas, type EngineReplicas } from "./helpers/engineReplicas";
import { configWriter, expectError } from "./helpers/inference";
import { startTestServer, type TestServer } from "./helpers/server";
import { SCENARIO_MS, pollUntil } from "./helpers/wait";

const MODEL = "failover-chat";
/** A system prompt past the prefix key's 1024 characters: prefix `k` is its own key. */
const system = (k: number) => `You are helper number ${k}. ` + "Keep to the point and say only what was asked. ".repeat(30);
const chat = (k: number, question: string) => ({
  model: MODEL,
  messages: [
    { role: "system" as const, content: system(k) },
    { role: "user" as const, content: question },
  ],
});

interface Listed {
  id: string;
  base_url: string;
  healthy: boolean;
  state: string;
  requests: number;
  failures: number;
}

const replicasOf = async (t: TestServer): Promise<Listed[]> => ((await (await t.api("/upstreams")).json()) as any).data.find((u: any) => u.name === "engines").replicas;

/** Prefixes (k) whose first choice among `listed` is the replica at `victim`, ranked as the server ranks them (nothing in flight, every breaker closed). */
function prefixesHomedOn(listed: Listed[], victim: number, n: number, from = 0): number[] {
  const views: ReplicaView[] = listed.map((r, idx) => ({ idx, id: r.id, baseUrl: r.base_url, weight: 1, limit: 0, seed: seedOf(r.id), ownClient: true }));
  const cells = newReplicaCells();
  const found: number[] = [];
  for (let k = from; found.length < n; k++) if (homeOf(views, cells, prefixKey(MODEL, chat(k, "q"))) === views[victim]) found.push(k);
  return found;
}

/** A plain answer through the SDK: its HTTP status, its text and the replica that answered (system_fingerprint "replica-N"). */
async function plain(client: OpenAI, k: number, question: string) {
  const { data, response } = await client.chat.completions.create(chat(k, question)).withResponse();
  return { status: response.status, text: data.choices[0]?.message.content, replica: data.system_fingerprint };
}

async function streamed(client: OpenAI, k: number, question: string) {
  const { data, response } = await client.chat.completions.create({ ...chat(k, question), stream: true }).withResponse();
  let text = "";
  let replica: string | null | undefined = null;
  for await (const chunk of data) {
    text += chunk.choices[0]?.delta?.content ?? "";
    replica ??= chunk.system_fingerprint;
  }
  return { status: response.status, text, replica };
}

/** The scenario, on a server with `threads` front threads. */
function failover(threads: number) {
  const cfg = configWriter("offpeak-failover-");
  let engines: EngineReplicas;
  let t: TestServer;
  const VICTIM = 1;

  beforeAll(async () => {
    engines = await startEngineReplicas(3, fixedLatencyShape(5), { models: [MODEL] });
    const config = cfg.write("c.json", { upstreams: [{ name: "engines", models: [MODEL], max_concurrency: 16, replicas: engines.baseUrls.map((base_url) => ({ base_url })) }] });
    t = await startTestServer({ argv: ["--config", config], env: { OFFPEAK_HTTP_THREADS: String(threads) } });
  }, SCENARIO_MS);

  afterAll(async () => {
    await t?.stop();
    await engines?.stop();
    cfg.cleanup();
  });

  test("a replica that refuses connections: every request, plain and streamed, is answered 200 by another; its failures show", async () => {
    const client = t.sdk();
    const listed = await replicasOf(t);
    expect(listed.map((r) => r.base_url)).toEqual(engines.baseUrls);
    // A first request of another prefix: on front threads the first one for a
    // model of several replicas is answered by the main thread, the next ones
    // by the front thread (src/http/front/desk.ts).
    const [other] = prefixesHomedOn(listed, (VICTIM + 1) % 3, 1, 1000);
    expect(await plain(client, other!, "warm-up")).toMatchObject({ status: 200, text: "warm-up" });
    await engines.replicas[VICTIM]!.kill();
    const homed = prefixesHomedOn(listed, VICTIM, 3);
    const answers = [];
    // Each prefix first: refused on the victim until its breaker opens (3 in a row), then sent past it.
    for (const [i, k] of homed.entries()) answers.push(i % 2 ? await streamed(client, k, `failover-${i}`) : await plain(client, k, `failover-${i}`));
    for (const [i, k] of homed.entries()) answers.push(i % 2 ? await plain(client, k, `again-${i}`) : await streamed(client, k, `again-${i}`));
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    expect(answers.map((a) => a.text)).toEqual([...homed.map((_, i) => `failover-${i}`), ...homed.map((_, i) => `again-${i}`)]);
    for (const a of answers) expect(a.replica).not.toBe(`replica-${VICTIM}`);
    expect(engines.replicas[VICTIM]!.stats().seen).toBe(0);
    const after = await replicasOf(t);
    expect(after[VICTIM]).toMatchObject({ healthy: false, state: "down" });
    expect(after[VICTIM]!.failures).toBeGreaterThanOrEqual(3);
    for (const [i, r] of after.entries()) if (i !== VICTIM) expect(r).toMatchObject({ healthy: true, failures: 0 });
  }, SCENARIO_MS);

  test("every replica down: the answer is the upstream's error, as with one engine (502, then 503 once it is down)", async () => {
    for (const r of engines.replicas) await r.kill();
    const ask = (q: string) => t.api("/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(chat(7, q)) });
    await expectError(await ask("all-down-0"), 502, { code: "upstream_error", message: /Upstream engines is unreachable/ });
    // Once its breakers are open and its probes fail, the upstream is down: answered at once.
    let n = 0;
    await pollUntil(
      async () => {
        const res = await ask(`all-down-${++n}`);
        if (res.status === 502) await expectError(res, 502, { code: "upstream_error" });
        return res;
      },
      (res) => res.status === 503,
      { what: "the upstream to be down", progress: () => 0 },
    ).then((res) => expectError(res, 503, { code: "upstream_unavailable" }));
  }, SCENARIO_MS);
}

test("only a call that never connected is sent elsewhere: not after a reset, a timeout or the client leaving", async () => {
  const refused = await fetch("http://127.0.0.1:1/v1/chat/completions", { method: "POST", body: "{}" }).catch((e) => e);
  expect(neverSent(new CallFailure(refused))).toBe(true);
  expect(neverSent(new CallFailure(new UpstreamConnectionError("Failed to connect", "ECONNREFUSED")))).toBe(true);
  expect(neverSent(new CallFailure(new UpstreamConnectionError("getaddrinfo ENOTFOUND gpu9", "ENOTFOUND")))).toBe(true);
  // The engine may have the request by then.
  expect(neverSent(new CallFailure(new UpstreamConnectionError("upstream closed the connection without answering")))).toBe(false);
  expect(neverSent(new CallFailure(new UpstreamConnectionError("reset", "ECONNRESET")))).toBe(false);
  expect(neverSent(new CallFailure(new DOMException("timed out", "TimeoutError"), true))).toBe(false);
  expect(neverSent(new CallFailure(refused, true))).toBe(false);
  expect(neverSent(new CallFailure(refused, false, true))).toBe(false);
});

describe("interactive failover on the main thread", () => failover(0));
describe("interactive failover on a front thread", () => failover(1));
