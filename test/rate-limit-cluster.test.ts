// src/inference/admission/clusterBudget.ts without a database: three
// ClusterBudgets (three nodes) share a store that does in memory what
// src/nodes/keyUsage.ts's statement does on the key's row (apply the
// delta, then give per dimension `want` as far as the window has it, or
// nothing at all if a limited dimension has less than its `need` left). test/cluster-rpm.test.ts runs the
// same over real nodes and Postgres.
import { describe, expect, test } from "bun:test";
import { ApiError } from "../src/errors";
import type { Budget, BudgetStore, Take, Taken } from "../src/inference/admission/budgetStore";
import { ClusterBudget, IDLE_MS } from "../src/inference/admission/clusterBudget";
import { awayFromMinuteEnd } from "./helpers/wait";

class MemoryStore implements BudgetStore {
  rows = new Map<string, Budget>();
  statements = 0;
  fail = false;
  constructor(private readonly live = 3) {}
  nodes(): number {
    return this.live;
  }
  async take(t: Take): Promise<Taken> {
    this.statements++;
    await Bun.sleep(1);
    if (this.fail) throw new Error("connection refused");
    const id = `${t.windowStart}/${t.keyId}`;
    const row = this.rows.get(id) ?? { requests: 0, tokens: 0 };
    const lim = { requests: t.limits.rpm ?? 0, tokens: t.limits.tpm ?? 0 };
    const got = { requests: 0, tokens: 0 };
    const dims = (["requests", "tokens"] as const).filter((k) => (k === "requests" ? t.limits.rpm : t.limits.tpm) !== null);
    for (const k of ["requests", "tokens"] as const) row[k] = Math.max(0, row[k] + t.delta[k]);
    // All or nothing: every limited dimension must have its `need` left.
    if (dims.every((k) => lim[k] - row[k] >= t.need[k]))
      for (const k of dims) {
        got[k] = Math.min(t.want[k], Math.max(0, lim[k] - row[k]));
        row[k] += got[k];
      }
    this.rows.set(id, row);
    return { got, total: { ...row } };
  }
}

/** Three nodes on one store. */
function cluster(store = new MemoryStore()) {
  const nodes = [0, 1, 2].map(() => {
    const l = new ClusterBudget(60_000);
    l.connect(store);
    return l;
  });
  return { store, nodes };
}

/** Admits or not (429), whether the answer comes at once or after a take. */
async function tryAdmit(l: ClusterBudget, key: string, limits: { rpm: number | null; tpm: number | null }, tokens = 0, now?: number): Promise<boolean> {
  try {
    await l.admit(key, limits, tokens, now);
    return true;
  } catch (e) {
    expect(e).toBeInstanceOf(ApiError);
    expect((e as ApiError).code).toBe("rate_limit_exceeded");
    return false;
  }
}

/** What a node's sync would send (src/nodes/keyUsage.ts): given back and owed budget, applied to the store. */
async function sync(l: ClusterBudget, store: MemoryStore, now: number) {
  for (const d of l.takeDeltas(now)) {
    const r = await store.take({ ...d, need: { requests: 0, tokens: 0 }, want: { requests: 0, tokens: 0 } });
    l.learned(d.keyId, d.windowStart, r.total);
  }
}

const rpm60 = { rpm: 60, tpm: null };
// The tests below run within one window: keep clear of a minute's end.
const settled = () => awayFromMinuteEnd(5000);

describe("a key's rpm over three nodes sharing one budget", () => {
  test("a burst at all three at once admits exactly the limit, and never asks the store per request", async () => {
    await settled();
    const { store, nodes } = cluster();
    const results = await Promise.all(Array.from({ length: 300 }, (_, i) => tryAdmit(nodes[i % 3]!, "k-burst", rpm60)));
    expect(results.filter(Boolean).length).toBe(60);
    expect(store.rows.get([...store.rows.keys()][0]!)!.requests).toBe(60);
    expect(store.statements).toBeLessThan(40);
  });

  test("one request at a time, all to one node or round-robin: exactly the limit", async () => {
    await settled();
    for (const spread of [1, 3]) {
      const { store, nodes } = cluster();
      let ok = 0;
      for (let i = 0; i < 150; i++) if (await tryAdmit(nodes[i % spread]!, `k-seq-${spread}`, rpm60)) ok++;
      expect(ok).toBe(60);
      // Blocks, not a statement a request: a few per node, and no more than one per RECHECK_MS once the budget is spent.
      expect(store.statements).toBeLessThan(30);
    }
  });

  test("budget a node took and then left idle goes back at its next sync, and the others use it", async () => {
    await settled();
    const { store, nodes } = cluster();
    const [a, b] = nodes as [ClusterBudget, ClusterBudget];
    expect(await tryAdmit(a, "k-idle", rpm60)).toBe(true);
    let ok = 1;
    for (let i = 0; i < 100; i++) if (await tryAdmit(b, "k-idle", rpm60)) ok++;
    // A's block (a sixth of the window, less the one it used) is still A's.
    expect(ok).toBe(51);
    const now = Date.now();
    await sync(a, store, now + IDLE_MS);
    // Past RECHECK_MS, B asks the store again and gets what A gave back.
    for (let i = 0; i < 20; i++) if (await tryAdmit(b, "k-idle", rpm60, 0, now + IDLE_MS + 300)) ok++;
    expect(ok).toBe(60);
  });

  test("budget beyond what a node's pace will use before the window ends goes back, the rest it keeps", async () => {
    const { store, nodes } = cluster();
    const [a, b] = nodes as [ClusterBudget, ClusterBudget];
    const limits = { rpm: null, tpm: 600 };
    // Ten seconds before a window's end (explicit times: the window is the one they fall in).
    const t0 = Date.now() - (Date.now() % 60_000) + 50_000;
    expect(await tryAdmit(a, "k-pace", limits, 1, t0)).toBe(true);
    expect(await tryAdmit(a, "k-pace", limits, 1, t0 + 1000)).toBe(true);
    // A took 100 (a sixth) and used 2 in 1.5 s: at that pace (and half again) it keeps 18 for the 8.5 s left.
    const row = () => store.rows.get([...store.rows.keys()][0]!)!.tokens;
    expect(row()).toBe(100);
    await sync(a, store, t0 + 1500);
    expect(row()).toBe(2 + 18);
    expect(a.current("k-pace", limits, t0 + 1500)["x-ratelimit-remaining-tokens"]).toBe(String(600 - 2));
    // B can have all the rest.
    expect(await tryAdmit(b, "k-pace", limits, 580, t0 + 1500)).toBe(true);
    expect(await tryAdmit(b, "k-pace", limits, 1, t0 + 1500)).toBe(false);
    // An idle node gives back everything, past IDLE_MS without a request.
    await sync(a, store, t0 + 1000 + IDLE_MS);
    expect(row()).toBe(2 + 580);
  });

  test("a node refused because the window is spent asks the store again only after RECHECK_MS", async () => {
    await settled();
    const { store, nodes } = cluster();
    for (let i = 0; i < 60; i++) expect(await tryAdmit(nodes[0]!, "k-spent", rpm60)).toBe(true);
    expect(await tryAdmit(nodes[0]!, "k-spent", rpm60)).toBe(false);
    const before = store.statements;
    for (let i = 0; i < 50; i++) expect(await tryAdmit(nodes[0]!, "k-spent", rpm60)).toBe(false);
    expect(store.statements).toBe(before);
    expect(await tryAdmit(nodes[0]!, "k-spent", rpm60, 0, Date.now() + 300)).toBe(false);
    expect(store.statements).toBe(before + 1);
  });

  test("a refunded request (529, or the client left the queue) goes back to the node's hand", async () => {
    await settled();
    const { nodes } = cluster();
    const a = nodes[0]!;
    const limits = { rpm: 2, tpm: null };
    const t0 = Date.now();
    expect(await tryAdmit(a, "k-refund", limits)).toBe(true);
    expect(a.refund("k-refund", limits, 0, t0)!["x-ratelimit-remaining-requests"]).toBe("2");
    expect(await tryAdmit(a, "k-refund", limits)).toBe(true);
    expect(await tryAdmit(a, "k-refund", limits)).toBe(true);
    expect(await tryAdmit(nodes[1]!, "k-refund", limits)).toBe(false);
  });

  test("tpm: completion tokens beyond the node's hand are owed to the row, and the others see them", async () => {
    await settled();
    const { store, nodes } = cluster();
    const [a, b] = nodes as [ClusterBudget, ClusterBudget];
    const limits = { rpm: null, tpm: 600 };
    expect(await tryAdmit(a, "k-tpm", limits, 10)).toBe(true);
    // A took a block of 100 (600 / 6); the answer used 500 completion tokens.
    a.charge("k-tpm", 500);
    await sync(a, store, Date.now());
    expect(store.rows.get([...store.rows.keys()][0]!)!.tokens).toBe(510);
    // 90 left: B gets one 80-token request, not a second.
    expect(await tryAdmit(b, "k-tpm", limits, 80)).toBe(true);
    expect(await tryAdmit(b, "k-tpm", limits, 80)).toBe(false);
  });

  test("the store unreachable: each node admits at most its even share, and owes it once the store is back", async () => {
    await settled();
    const { store, nodes } = cluster();
    store.fail = true;
    const errors: unknown[] = [];
    for (const n of nodes) n.onStoreError = (e) => errors.push(e);
    let ok = 0;
    for (let i = 0; i < 90; i++) if (await tryAdmit(nodes[i % 3]!, "k-down", rpm60)) ok++;
    expect(ok).toBe(60);
    expect(errors.length).toBe(3);
    store.fail = false;
    const now = Date.now() + 2000;
    for (const n of nodes) await sync(n, store, now);
    expect(store.rows.get([...store.rows.keys()][0]!)!.requests).toBe(60);
    expect(await tryAdmit(nodes[0]!, "k-down", rpm60, 0, now)).toBe(false);
  });
});
