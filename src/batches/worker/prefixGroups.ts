// Lines that share a prompt prefix go out close together in time, whatever
// their order in the file (docs/CONTRACT.md §21). The dispatch sends a
// prefix to the same replica (inference/replicas/pick.ts); an engine keeps
// only so many prefixes in its cache, so a replica that receives its
// prefixes in turn, rather than mixed at random, recomputes each far less.
//
// A shard's lines pass through a window of at most MAX_LINES lines (and
// MAX_CHARS characters): they are grouped by prefix key, and sent from a few
// open groups at a time, in turn, each until it is empty; then the group
// with the most lines waiting opens. The window bounds memory and how far a
// line can be overtaken; the output has one line per custom_id in any order.

export const MAX_LINES = 1024;
export const MAX_CHARS = 32 * 1024 * 1024;

export class PrefixGroups<T> {
  private readonly groups = new Map<number, T[]>();
  private open: number[] = [];
  private turn = 0;
  lines = 0;
  chars = 0;

  /** `openAtOnce`: groups sent from at the same time (a few per replica keeps every replica busy). */
  constructor(private readonly openAtOnce: number) {}

  get full(): boolean {
    return this.lines >= MAX_LINES || this.chars >= MAX_CHARS;
  }

  add(key: number, item: T, chars: number): void {
    let g = this.groups.get(key);
    if (!g) this.groups.set(key, (g = []));
    g.push(item);
    this.lines++;
    this.chars += chars;
  }

  /** The next line to send (its characters are given back by `sent`), or undefined when the window is empty. */
  next(): T | undefined {
    if (this.lines === 0) return undefined;
    while (this.open.length < this.openAtOnce && this.openLargest());
    const key = this.open[this.turn % this.open.length]!;
    const g = this.groups.get(key)!;
    const item = g.shift()!;
    this.lines--;
    if (g.length === 0) {
      this.groups.delete(key);
      this.open.splice(this.open.indexOf(key), 1);
    } else this.turn++;
    return item;
  }

  sent(chars: number): void {
    this.chars -= chars;
  }

  private openLargest(): boolean {
    let best: number | null = null;
    let most = 0;
    for (const [key, g] of this.groups) if (g.length > most && !this.open.includes(key)) [best, most] = [key, g.length];
    if (best === null) return false;
    this.open.push(best);
    return true;
  }
}
