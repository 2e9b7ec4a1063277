// Lines that share a prompt prefix go out close together in time, whatever
// their order in the file (docs/CONTRACT.md §21). Each prefix has a home
// replica (inference/replicas/pick.ts homeOf: the same on every node); an
// engine keeps only so many prefixes in its cache, so a replica that works
// through its prefixes a few at a time, rather than all of them mixed,
// recomputes each far less.
//
// A shard's lines pass through a window of at most MAX_LINES lines (and
// MAX_CHARS characters), grouped by prefix. A group opens on a replica and
// all its lines go there. The next line sent is:
//  1. from the oldest open group whose replica has room (its requests in
//     flight below its share);
//  2. else, for a replica with room and fewer than OPEN_PER_REPLICA open
//     groups, the first line of the largest group homed on it;
//  3. else, for such a replica with no group of its own left, the first
//     line of the largest group homed elsewhere, which moves to it, or half
//     of the largest open group elsewhere (a hot prefix, split over two
//     replicas): replicas that finish their own prefixes take work from the
//     busiest, so none idles while another has a queue.
// A group that opens sends one line first and the rest once that one has
// finished: an engine caches a prefix once it has computed it, so lines
// sent with the first would each compute it again. Groups of one prefix in
// several windows (the shards of a batch run in several Workers) count once
// on their replica, and once one of them has its first answer the others
// are warm too (src/inference/replicas/openPrefixes.ts).
//
// The window bounds memory and how far a line can be overtaken; the output
// has one line per custom_id in any order.

export const MAX_LINES = 1024;
export const MAX_CHARS = 32 * 1024 * 1024;
/** Groups a replica works on at once, every shard's window counted: one being sent, the next ones warming its cache (their first line costs a whole prefill, the others far less). */
const OPEN_PER_REPLICA = 4;
/** A group is split onto an idle replica only if at least this many lines are left (fewer finish soon where they are). */
const SPLIT_MIN = 8;

/** next()'s answer when nothing may go now: wait for a line in flight to finish. */
export const WAIT = Symbol("wait");

/** Where groups go: the replicas taking work, a prefix's home among them, and whether one has room now. */
export interface Placement {
  replicas(): readonly number[];
  home(key: number): number;
  hasRoom(replica: number): boolean;
  /** Prefixes open on a replica in every window (several shards may run at once; one prefix open in two counts once). */
  groupsOn(replica: number): number;
  /** A group of prefix `key` opens on a replica: true when the prefix is warm there already (another window's group of it had its first answer). */
  opened(replica: number, key: number): boolean;
  closed(replica: number, key: number): void;
  /** The first line of a group of prefix `key` on a replica was answered. */
  warmed(replica: number, key: number): void;
  /** Prefix `key` on a replica now, every window's groups counted: 0 not open, 1 open, 2 open and warm. */
  stateOn(replica: number, key: number): 0 | 1 | 2;
  /** The prefixes open on a replica now, in any window (a few: as many as its engine caches, or twice that). */
  keysOn(replica: number): readonly number[];
  /** A line was placed on a replica (next() returned it), and it ended there (ended()). */
  placed(replica: number): void;
  ended(replica: number): void;
}

export interface Group<T> {
  key: number;
  items: T[];
  /** The replica its lines go to, once open (-1 before). */
  replica: number;
  /** Its first line has been sent. */
  started: boolean;
  /** Its first line has finished: the rest may go. */
  warm: boolean;
}

/** A line to send, the replica it goes to, and its group (to call ended() with when it ended). */
export interface Next<T> {
  item: T;
  key: number;
  replica: number;
  group: Group<T>;
}

export class PrefixGroups<T> {
  /** Groups not open yet, and the open ones still taking lines, by key (a split's second half is in `open` only). */
  private readonly byKey = new Map<number, Group<T>>();
  private open: Group<T>[] = [];
  /** Parts of hot prefixes placed on a replica, not open yet: opened there like its own groups. */
  private parts: { to: number; group: Group<T> }[] = [];
  lines = 0;
  chars = 0;

  constructor(private readonly placement: Placement) {}

  get full(): boolean {
    return this.lines >= MAX_LINES || this.chars >= MAX_CHARS;
  }

  add(key: number, item: T, chars: number): void {
    let g = this.byKey.get(key);
    if (!g) this.byKey.set(key, (g = { key, items: [], replica: -1, started: false, warm: false }));
    g.items.push(item);
    this.lines++;
    this.chars += chars;
  }

  /** The next line to send, WAIT, or undefined when the window is empty. */
  next(): Next<T> | typeof WAIT | undefined {
    if (this.lines === 0) return undefined;
    const p = this.placement;
    const live = new Set(p.replicas());
    // A group whose replica left the set (drained, removed) opens again elsewhere.
    for (const g of this.open.slice()) if (!live.has(g.replica)) this.reopen(g);
    for (const x of this.parts) if (!live.has(x.to)) x.to = p.home(x.group.key);
    // Warm: its own first line was answered, or another window's of its prefix on its replica was.
    const ready = (g: Group<T>) => g.warm || !g.started || (g.warm = p.stateOn(g.replica, g.key) === 2);
    // 1.
    for (const g of this.open) if (ready(g) && p.hasRoom(g.replica)) return this.take(g);
    for (const r of live) {
      if (!p.hasRoom(r)) continue;
      // A prefix another window has open on r: it takes no place of its own there.
      const joined = this.largestJoinable(p.keysOn(r));
      if (joined) return this.take(this.openOn(joined, r));
      if (p.groupsOn(r) >= OPEN_PER_REPLICA) continue;
      // 2.
      const part = this.parts.findIndex((x) => x.to === r);
      if (part >= 0) return this.take(this.openOn(this.parts.splice(part, 1)[0]!.group, r));
      const own = this.largestClosed((x) => p.home(x.key) === r);
      if (own) {
        this.openOn(own, r);
        this.spreadHot(own, live);
        return this.take(own);
      }
      // 3.
      const moved = this.largestClosed(() => true);
      if (moved) return this.take(this.openOn(moved, r));
      if (this.parts.length > 0) return this.take(this.openOn(this.parts.shift()!.group, r));
      const split = this.splitLargest(r);
      if (split) return this.take(split);
    }
    return WAIT;
  }

  sent(chars: number): void {
    this.chars -= chars;
  }

  /** A line next() returned ended (answered, failed or stopped): if it was its group's first, the others may go. */
  ended(line: Next<T>): void {
    if (!line.group.warm) {
      line.group.warm = true;
      this.placement.warmed(line.replica, line.key);
    }
    this.placement.ended(line.replica);
  }

  private openOn(g: Group<T>, replica: number): Group<T> {
    g.replica = replica;
    this.open.push(g);
    // Warm there already (another window's group of the prefix): no line needs to go alone first.
    if (this.placement.opened(replica, g.key)) g.started = g.warm = true;
    return g;
  }

  /** Closes `g` (emptied, or its replica gone): it no longer counts on its replica. */
  private closeGroup(g: Group<T>): void {
    this.open.splice(this.open.indexOf(g), 1);
    this.placement.closed(g.replica, g.key);
  }

  /** The window is left (the shard ended or paused): its open groups stop counting on their replicas. */
  release(): void {
    for (const g of this.open) this.placement.closed(g.replica, g.key);
    this.open = [];
  }

  private reopen(g: Group<T>): void {
    this.closeGroup(g);
    g.replica = -1;
    g.started = g.warm = false;
    if (!this.byKey.has(g.key)) this.byKey.set(g.key, g);
    else this.byKey.get(g.key)!.items.push(...g.items);
  }

  private take(g: Group<T>): Next<T> {
    const item = g.items.shift()!;
    g.started = true;
    this.lines--;
    this.placement.placed(g.replica);
    if (g.items.length === 0) {
      // Emptied: it leaves the window (a later line of its prefix starts a new group).
      if (this.byKey.get(g.key) === g) this.byKey.delete(g.key);
      this.closeGroup(g);
    }
    return { item, key: g.key, replica: g.replica, group: g };
  }

  /** Of this window's groups not open yet, the one with the most lines among those of `keys` (looked up by key: the window may hold hundreds of groups, a replica has a few prefixes open). */
  private largestJoinable(keys: readonly number[]): Group<T> | null {
    let best: Group<T> | null = null;
    for (const k of keys) {
      const g = this.byKey.get(k);
      if (g && g.replica === -1 && (!best || g.items.length > best.items.length)) best = g;
    }
    return best;
  }

  /** The group not open yet with the most lines, among those `where` accepts. */
  private largestClosed(where: (g: Group<T>) => boolean): Group<T> | null {
    let best: Group<T> | null = null;
    for (const g of this.byKey.values()) if (g.replica === -1 && where(g) && (!best || g.items.length > best.items.length)) best = g;
    return best;
  }

  /**
   * A hot prefix (a group with more lines than half of a replica's share of
   * the window) would keep its replica busy long after the others: its lines
   * beyond that go, in parts of that size, to the replicas with the least
   * work waiting, each part a group of its own there, opened when that
   * replica opens its next group (so it counts among its open groups).
   */
  private spreadHot(g: Group<T>, live: Set<number>): void {
    if (live.size < 2) return;
    const part = Math.max(SPLIT_MIN, Math.ceil(this.lines / live.size / 2));
    while (g.items.length > part) {
      const waiting = new Map<number, number>([...live].map((r) => [r, 0]));
      for (const x of this.open) waiting.set(x.replica, (waiting.get(x.replica) ?? 0) + x.items.length);
      for (const x of this.parts) waiting.set(x.to, (waiting.get(x.to) ?? 0) + x.group.items.length);
      for (const x of this.byKey.values()) if (x.replica === -1) waiting.set(this.placement.home(x.key), (waiting.get(this.placement.home(x.key)) ?? 0) + x.items.length);
      let to = -1;
      for (const [r, n] of waiting) if (r !== g.replica && live.has(r) && (to === -1 || n < waiting.get(to)!)) to = r;
      if (to === -1) return;
      this.parts.push({ to, group: { key: g.key, items: g.items.splice(g.items.length - part), replica: -1, started: false, warm: false } });
    }
  }

  /** Half of the open group with the most lines left, as a group of its own on `replica`; null if none has SPLIT_MIN. */
  private splitLargest(replica: number): Group<T> | null {
    let big: Group<T> | null = null;
    for (const g of this.open) if (g.replica !== replica && g.items.length >= SPLIT_MIN && (!big || g.items.length > big.items.length)) big = g;
    if (!big) return null;
    const half = big.items.splice(Math.ceil(big.items.length / 2));
    return this.openOn({ key: big.key, items: half, replica: -1, started: false, warm: false }, replica);
  }
}
