// The prefix window of a shard (src/batches/worker/prefixGroups.ts), against
// a placement of its own (which replica is a prefix's home, which has room):
// lines sharing a prefix leave together, all to one replica; a group sends
// its first line alone and the rest once it finished; a replica works on at
// most four groups at once; a replica with nothing of its own takes groups
// from the others; a hot prefix is split; every line leaves exactly once.
import { describe, expect, test } from "bun:test";
import { MAX_LINES, PrefixGroups, WAIT, type Next, type Placement } from "../src/batches/worker/prefixGroups";
import { inFlightOf, newReplicaCells, placedOn } from "../src/inference/replicas/cells";
import { prefixClosed, prefixKeysOn, prefixOpened, prefixStateOn, prefixWarmed, prefixesOn } from "../src/inference/replicas/openPrefixes";

/** `live` replicas; a prefix's home is key % (number of replicas); room below `room` in flight (`inFlight`, set by the test). */
function placement(live: number[], room: number, inFlight: number[], groups: number[] = []): Placement {
  return {
    replicas: () => live,
    home: (key) => live[key % live.length]!,
    hasRoom: (r) => (inFlight[r] ?? 0) < room,
    groupsOn: (r) => groups[r] ?? 0,
    opened: (r) => {
      groups[r] = (groups[r] ?? 0) + 1;
      return false;
    },
    closed: (r) => void (groups[r] = (groups[r] ?? 0) - 1),
    warmed: () => {},
    stateOn: () => 0,
    keysOn: () => [],
    placed: () => {},
    ended: () => {},
  };
}

/** As the Workers share it: one replica's table of open prefixes in shared cells (src/inference/replicas/openPrefixes.ts). */
function sharedPlacement(cells: ReturnType<typeof newReplicaCells>, room: number, inFlight: number[]): Placement {
  return {
    replicas: () => [0],
    home: () => 0,
    hasRoom: (r) => (inFlight[r] ?? 0) < room,
    groupsOn: (r) => prefixesOn(cells, r),
    opened: (r, key) => prefixOpened(cells, r, key),
    closed: (r, key) => prefixClosed(cells, r, key),
    warmed: (r, key) => prefixWarmed(cells, r, key),
    stateOn: (r, key) => prefixStateOn(cells, r, key),
    keysOn: (r) => prefixKeysOn(cells, r),
    placed: () => {},
    ended: () => {},
  };
}

/** As the Worker's placement: room counts the lines placed on a replica and not ended, whether or not their requests went out yet. */
function placedPlacement(live: number[], room: number): Placement & { placedOn: number[] } {
  const placedOn: number[] = live.map(() => 0);
  const groups: number[] = [];
  return {
    placedOn,
    replicas: () => live,
    home: (key) => live[key % live.length]!,
    hasRoom: (r) => placedOn[r]! < room,
    groupsOn: (r) => groups[r] ?? 0,
    opened: (r) => {
      groups[r] = (groups[r] ?? 0) + 1;
      return false;
    },
    closed: (r) => void (groups[r] = (groups[r] ?? 0) - 1),
    warmed: () => {},
    stateOn: () => 0,
    keysOn: () => [],
    placed: (r) => void placedOn[r]!++,
    ended: (r) => void placedOn[r]!--,
  };
}

/** Sends every line, each finishing at once (its group warm after its first). */
function drain<T>(g: PrefixGroups<T>): Next<T>[] {
  const out: Next<T>[] = [];
  for (let x = g.next(); x !== undefined; x = g.next()) {
    if (x === WAIT) throw new Error("WAIT with nothing in flight");
    out.push(x);
    g.ended(x);
  }
  return out;
}

/** Sends lines while replicas have room, finishing the oldest in flight whenever nothing may go: as a shard does. */
function simulate<T>(g: PrefixGroups<T>, inFlight: number[]): Next<T>[] {
  const out: Next<T>[] = [];
  const running: Next<T>[] = [];
  for (;;) {
    const x = g.next();
    if (x === undefined) break;
    if (x === WAIT) {
      const done = running.shift();
      if (!done) throw new Error("WAIT with nothing in flight");
      inFlight[done.replica]!--;
      g.ended(done);
      continue;
    }
    out.push(x);
    running.push(x);
    inFlight[x.replica] = (inFlight[x.replica] ?? 0) + 1;
  }
  return out;
}

const sendAll = <T>(g: PrefixGroups<T>): Next<T>[] => {
  const out: Next<T>[] = [];
  for (let x = g.next(); x !== undefined && x !== WAIT; x = g.next()) out.push(x);
  return out;
};

describe("the prefix window", () => {
  test("lines in random order leave grouped by prefix, each once, each prefix to one replica (its home while it has room)", () => {
    const inFlight = [0, 0];
    const g = new PrefixGroups<string>(placement([0, 1], 4, inFlight));
    const order: string[] = [];
    for (let i = 0; i < 10; i++) for (const k of [3, 1, 5, 0, 4, 2]) order.push(`${k}-${i}`);
    for (const line of order) g.add(Number(line.split("-")[0]), line, 10);
    const out = simulate(g, inFlight);
    expect(out.map((x) => x.item).sort()).toEqual(order.slice().sort());
    // A replica with nothing left of its own takes half of a big group of the other's: at most two replicas a prefix.
    for (const k of [0, 1, 2, 3, 4, 5]) expect(new Set(out.filter((x) => x.key === k).map((x) => x.replica)).size).toBeLessThanOrEqual(2);
    expect(out.filter((x) => x.replica === x.key % 2).length).toBeGreaterThanOrEqual(40);
  });

  test("a group sends its first line alone, the rest once it finished; four groups of a replica open at once", () => {
    const g = new PrefixGroups<string>(placement([0], 1000, []));
    for (const k of [1, 2, 3, 4, 5]) for (let i = 0; i < 2; i++) g.add(k, `${k}-${i}`, 1);
    const firsts = sendAll(g);
    expect(firsts.length).toBe(4);
    for (const f of firsts) expect(f.item.endsWith("-0")).toBe(true);
    expect(g.next()).toBe(WAIT);
    g.ended(firsts[2]!);
    expect(g.next()).toMatchObject({ item: `${firsts[2]!.key}-1` });
    // That group emptied: the fifth opens, with its first line alone.
    const fifth = g.next() as Next<string>;
    expect(fifth.item.endsWith("-0")).toBe(true);
    expect(firsts.map((f) => f.key)).not.toContain(fifth.key);
    expect(g.next()).toBe(WAIT);
    for (const f of [...firsts, fifth]) g.ended(f);
    expect(drain(g).length).toBe(4);
    expect(g.next()).toBeUndefined();
  });

  test("a full replica holds its groups back; a replica with nothing of its own takes a group of another's, whole", () => {
    const inFlight = [0, 0];
    const g = new PrefixGroups<string>(placement([0, 1], 2, inFlight));
    // Keys 0 and 2 are homed on replica 0; none on replica 1.
    for (const k of [0, 2]) for (let i = 0; i < 3; i++) g.add(k, `${k}-${i}`, 1);
    inFlight[0] = 2;
    const taken = g.next() as Next<string>;
    expect(taken.replica).toBe(1);
    g.ended(taken);
    inFlight[1] = 1;
    // The rest of that group follows it to replica 1.
    const rest = sendAll(g);
    expect(rest.slice(0, 2).map((x) => [x.key, x.replica])).toEqual([
      [taken.key, 1],
      [taken.key, 1],
    ]);
  });

  test("a hot prefix is split: its lines beyond half a replica's share go to the replica with the least waiting", () => {
    const inFlight = [0, 0, 0, 0];
    const g = new PrefixGroups<string>(placement([0, 1, 2, 3], 8, inFlight));
    for (let i = 0; i < 80; i++) g.add(0, `hot-${i}`, 1); // home 0
    for (const k of [1, 2, 3, 5, 6, 7]) for (let i = 0; i < 4; i++) g.add(k, `${k}-${i}`, 1);
    const out = simulate(g, inFlight);
    expect(out.length).toBe(104);
    const hotOn = new Set(out.filter((x) => x.key === 0).map((x) => x.replica));
    expect(hotOn.size).toBeGreaterThan(1);
  });

  test("a group whose replica leaves the set opens again on another", () => {
    const live = [0, 1];
    const inFlight = [1, 0]; // replica 0 full: the group opens on its home
    const g = new PrefixGroups<string>(placement(live, 1, inFlight));
    for (let i = 0; i < 3; i++) g.add(1, `a-${i}`, 1); // home 1
    const first = g.next() as Next<string>;
    expect(first.replica).toBe(1);
    g.ended(first);
    live.splice(1, 1); // replica 1 drained
    inFlight[0] = 0;
    const rest = drain(g);
    expect(rest.map((x) => x.replica)).toEqual([0, 0]);
  });

  test("a warm group goes out only as far as its replica has room, counting lines placed whose requests have not gone out yet", () => {
    const p = placedPlacement([0, 1], 4);
    const g = new PrefixGroups<string>(p);
    for (let i = 0; i < 30; i++) g.add(0, `a-${i}`, 1); // home 0, hot enough to split only once 0 has its share
    const first = g.next() as Next<string>;
    g.ended(first);
    // Nothing ends from here on: what goes out in one turn is bounded by room on each replica.
    const burst = sendAll(g);
    for (const r of [0, 1]) expect(burst.filter((x) => x.replica === r).length).toBeLessThanOrEqual(4);
    expect(p.placedOn).toEqual(p.placedOn.map((n) => Math.min(n, 4)));
    expect(g.next()).toBe(WAIT);
    // One ends: exactly one more may go to its replica.
    const done = burst.find((x) => x.replica === 0)!;
    g.ended(done);
    const again = g.next() as Next<string>;
    expect(again).not.toBe(WAIT);
    expect(p.placedOn[0]).toBeLessThanOrEqual(4);
  });

  test("two windows (two shards) share a replica's four open groups; release() gives a window's back", () => {
    const groups: number[] = [];
    const a = new PrefixGroups<string>(placement([0], 1000, [], groups));
    const b = new PrefixGroups<string>(placement([0], 1000, [], groups));
    for (const k of [1, 2, 3]) for (let i = 0; i < 2; i++) a.add(k, `a${k}-${i}`, 1);
    for (const k of [4, 5, 6]) for (let i = 0; i < 2; i++) b.add(k, `b${k}-${i}`, 1);
    expect(sendAll(a).length).toBe(3);
    expect(sendAll(b).length).toBe(1);
    expect(b.next()).toBe(WAIT);
    expect(groups[0]).toBe(4);
    a.release();
    expect(groups[0]).toBe(1);
    expect(sendAll(b).length).toBe(2);
  });

  test("two windows with lines of one prefix: it takes one of the replica's places; once one window's first line is answered the other's lines go at once", () => {
    const cells = newReplicaCells();
    const inFlight = [0];
    const a = new PrefixGroups<string>(sharedPlacement(cells, 1000, inFlight));
    const b = new PrefixGroups<string>(sharedPlacement(cells, 1000, inFlight));
    for (let i = 0; i < 3; i++) a.add(7, `a7-${i}`, 1);
    for (const k of [1, 2, 3]) a.add(k, `a${k}`, 1);
    for (let i = 0; i < 3; i++) b.add(7, `b7-${i}`, 1);
    for (const k of [4, 5, 6]) b.add(k, `b${k}`, 1);
    // a opens its four largest: 7 first, then three of one line each (which close as they go).
    const firstA = a.next() as Next<string>;
    expect(firstA.item).toBe("a7-0");
    for (const x of sendAll(a)) a.ended(x);
    // Open on the replica: 7 (in a). b's group of 7 joins it, taking no place of its own: b still opens its three others.
    const fromB = sendAll(b);
    expect(fromB.map((x) => x.item)).toEqual(["b7-0", "b4", "b5", "b6"]);
    expect(prefixesOn(cells, 0)).toBe(1);
    for (const x of fromB.slice(1)) b.ended(x);
    // a's first line of 7 is answered: the prefix is warm on the replica.
    a.ended(firstA);
    expect(sendAll(a).map((x) => x.item)).toEqual(["a7-1", "a7-2"]);
    // A group of 7 opening in a third window now (b's is still open) needs no line alone first.
    const c = new PrefixGroups<string>(sharedPlacement(cells, 1000, inFlight));
    for (let i = 0; i < 3; i++) c.add(7, `c7-${i}`, 1);
    expect(sendAll(c).map((x) => x.item)).toEqual(["c7-0", "c7-1", "c7-2"]);
    // b's group of 7 is warm too, though its own first line has not been answered.
    expect(sendAll(b).map((x) => x.item)).toEqual(["b7-1", "b7-2"]);
    b.release();
    expect(prefixesOn(cells, 0)).toBe(0);
  });

  test("a replica with its four prefixes open takes no fifth, but another window's lines of one of those four join it", () => {
    const cells = newReplicaCells();
    const a = new PrefixGroups<string>(sharedPlacement(cells, 1000, [0]));
    const b = new PrefixGroups<string>(sharedPlacement(cells, 1000, [0]));
    for (const k of [7, 8, 9, 10]) for (let i = 0; i < 2; i++) a.add(k, `a${k}-${i}`, 1);
    expect(sendAll(a).length).toBe(4);
    expect(prefixesOn(cells, 0)).toBe(4);
    for (let i = 0; i < 3; i++) b.add(11, `b11-${i}`, 1);
    for (let i = 0; i < 2; i++) b.add(9, `b9-${i}`, 1);
    expect(b.next()).toMatchObject({ item: "b9-0" });
    expect(b.next()).toBe(WAIT);
    expect(prefixesOn(cells, 0)).toBe(4);
  });

  test("a replica's table of open prefixes stays within its own cells: a full table, warm and closed again, leaves the next replica's counts alone", () => {
    const cells = newReplicaCells();
    for (let k = 1; k <= 10; k++) prefixOpened(cells, 0, k); // 8 entries and 2 beyond
    for (let k = 1; k <= 10; k++) prefixWarmed(cells, 0, k);
    expect(prefixesOn(cells, 0)).toBe(10);
    expect([inFlightOf(cells, 1), placedOn(cells, 1), prefixesOn(cells, 1)]).toEqual([0, 0, 0]);
    for (let k = 1; k <= 10; k++) prefixClosed(cells, 0, k);
    expect(prefixesOn(cells, 0)).toBe(0);
    // Keys are unsigned 32-bit hashes: one from 2^31 is found again (the cells are Int32).
    const big = 0xdeadbeef;
    prefixOpened(cells, 0, big);
    prefixWarmed(cells, 0, big);
    expect(prefixStateOn(cells, 0, big)).toBe(2);
    expect(prefixOpened(cells, 0, big)).toBe(true);
    prefixClosed(cells, 0, big);
    prefixClosed(cells, 0, big);
    expect(prefixesOn(cells, 0)).toBe(0);
    expect([inFlightOf(cells, 1), placedOn(cells, 1), prefixesOn(cells, 1)]).toEqual([0, 0, 0]);
  });

  test("full at MAX_LINES lines, and by characters; sent() gives characters back", () => {
    const g = new PrefixGroups<number>(placement([0], 1000, []));
    for (let i = 0; i < MAX_LINES - 1; i++) g.add(i % 3, i, 1);
    expect(g.full).toBe(false);
    g.add(1, -1, 1);
    expect(g.full).toBe(true);
    g.next();
    g.sent(1);
    expect(g.full).toBe(false);
    const big = new PrefixGroups<number>(placement([0], 1000, []));
    big.add(1, 1, 40 * 1024 * 1024);
    expect(big.full).toBe(true);
    big.next();
    big.sent(40 * 1024 * 1024);
    expect(big.full).toBe(false);
  });
});
