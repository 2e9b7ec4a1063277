// A set of 64-bit hashes in two typed arrays (open addressing, linear
// probing). One million custom_ids take 16 MB here, against ≈100 MB for a
// Set<string>; memory must not grow with the text of the ids.
export class HashSet64 {
  /** Slot k holds (hi, lo) at [2k, 2k+1]: one cache line per probe, not two. */
  private slots: Int32Array;
  private mask: number;
  /**
   * Odd multiplier for the slot index, random per set: ids crafted so that
   * their fingerprints share a slot under a known multiplier (which would
   * make linear probing quadratic) do not share one here.
   */
  private readonly mult = ((Math.random() * 0x100000000) | 1) >>> 0;
  size = 0;

  constructor(initialCapacity = 1 << 16) {
    let cap = 1;
    while (cap < initialCapacity) cap <<= 1;
    this.slots = new Int32Array(cap * 2);
    this.mask = cap - 1;
  }

  /**
   * Adds the 64-bit fingerprint of `b[start, end)` — two independent 32-bit
   * hashes (FNV-1a style, with murmur3's finaliser) of the bytes; returns
   * false if it was already present. Over UTF-8 bytes, so the byte-level and
   * the JSON.parse paths of the validator agree.
   */
  addBytes(b: Uint8Array, start: number, end: number): boolean {
    fingerprint(b, start, end);
    return this.add(fp.hi, fp.lo);
  }

  /** addBytes of a string's UTF-8 encoding. */
  addString(s: string): boolean {
    const b = encoder.encode(s);
    return this.addBytes(b, 0, b.length);
  }

  /** Whether (hi, lo) is present. */
  has(hi: number, lo: number): boolean {
    if (hi === 0 && lo === 0) lo = 1;
    hi |= 0;
    lo |= 0;
    const slots = this.slots;
    const mask = this.mask;
    let i = (lo ^ Math.imul(hi, this.mult)) & mask;
    for (;;) {
      const h = slots[2 * i]!;
      const l = slots[2 * i + 1]!;
      if (h === 0 && l === 0) return false;
      if (h === hi && l === lo) return true;
      i = (i + 1) & mask;
    }
  }

  /** Slots (capacity) now; the set grows past 0.7 of them. */
  get capacity(): number {
    return this.mask + 1;
  }

  /** Calls `f` with every entry (in slot order, not insertion order). */
  forEach(f: (hi: number, lo: number) => void): void {
    const slots = this.slots;
    for (let i = 0; i < slots.length; i += 2) if (slots[i] !== 0 || slots[i + 1] !== 0) f(slots[i]!, slots[i + 1]!);
  }

  /** Adds (hi, lo); returns false if it was already present. (0,0) is the empty slot marker, so it is folded into (0,1). */
  add(hi: number, lo: number): boolean {
    if (hi === 0 && lo === 0) lo = 1;
    if ((this.size + 1) * 10 > (this.mask + 1) * 7) this.grow();
    hi |= 0;
    lo |= 0;
    const slots = this.slots;
    const mask = this.mask;
    let i = (lo ^ Math.imul(hi, this.mult)) & mask;
    for (;;) {
      const h = slots[2 * i]!;
      const l = slots[2 * i + 1]!;
      if (h === 0 && l === 0) {
        slots[2 * i] = hi;
        slots[2 * i + 1] = lo;
        this.size++;
        return true;
      }
      if (h === hi && l === lo) return false;
      i = (i + 1) & mask;
    }
  }

  private grow(): void {
    const old = this.slots;
    const cap = (this.mask + 1) * 2;
    this.slots = new Int32Array(cap * 2);
    this.mask = cap - 1;
    this.size = 0;
    for (let i = 0; i < old.length; i += 2) if (old[i] !== 0 || old[i + 1] !== 0) this.add(old[i]!, old[i + 1]!);
  }
}

/** The last fingerprint() computed: a module-level pair, so hashing allocates nothing. */
export const fp = { hi: 0, lo: 0 };

/**
 * The 64-bit fingerprint of `b[start, end)` into `fp` — two independent
 * 32-bit hashes (FNV-1a style, with murmur3's finaliser) of the bytes.
 */
export function fingerprint(b: Uint8Array, start: number, end: number): void {
  let h1 = 0x811c9dc5 ^ (end - start);
  let h2 = 0x2f0d1a3b;
  for (let i = start; i < end; i++) {
    const c = b[i]!;
    h1 = Math.imul(h1 ^ c, 0x01000193);
    h2 = Math.imul(h2 ^ c, 0x5bd1e995) ^ (h2 >>> 15);
  }
  fp.hi = fmix32(h1);
  fp.lo = fmix32(h2 ^ Math.imul(end - start, 0x9e3779b1));
}

/** fingerprint() of a string's UTF-8 encoding. */
export function fingerprintString(s: string): void {
  const b = encoder.encode(s);
  fingerprint(b, 0, b.length);
}

function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return h ^ (h >>> 16);
}

const encoder = new TextEncoder();
