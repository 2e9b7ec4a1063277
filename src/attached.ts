// A value attached to an object (a Request, a Response) under a private
// symbol: what a WeakMap keyed by the object would do, without the cost.
// Every WeakMap entry is work for each garbage collection, and the request
// path made three per request; at 15-18k requests a second the median GC
// pause was 1.6-2.0 ms with WeakMaps and 1.1-1.2 ms with these (measured
// with BUN_JSC_logGC=1 under wrk -c32 against the benchmarks' zero-latency loopback upstream).
export interface Attached<T> {
  get(owner: object): T | undefined;
  set(owner: object, value: T): void;
}

export function attached<T>(name: string): Attached<T> {
  const key = Symbol(name);
  return {
    get: (owner) => (owner as Record<symbol, T | undefined>)[key],
    set: (owner, value) => {
      (owner as Record<symbol, T>)[key] = value;
    },
  };
}
