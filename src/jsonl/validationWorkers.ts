// How many scanner Workers check an upload's lines by default (config
// uploadValidationWorkers, OFFPEAK_UPLOAD_VALIDATION_WORKERS; an upload uses
// one more, its duplicate finder: src/jsonl/validatorClient.ts).
//
// Measured with bench/upload-workers.ts on 2 cores (curl, the HTTP thread
// and the Workers sharing them), a 1M-line file (284.5 MB), 7 rounds:
// 1 scanner 215 MB/s, 2 scanners 240, 4 scanners 258 (medians; the ranges
// overlap), peak RSS 160–166 MB for all three. One scanner is the busiest
// thread (3.4 ms of CPU per MB against the HTTP thread's 1.9), so with a core
// for each thread it would cap an upload near 290 MB/s; from two scanners on
// the HTTP thread is the busiest, ≈530 MB/s by the same estimate, and the
// finder needs ≈0.8 ms/MB. Four keep the scanners well clear of the HTTP
// thread on a machine with cores to spare; more would only add Workers
// (≈2.5 MB and a thread each) to every upload.
/** The default for a machine with `cores` usable cores: 2 up to 3 cores, 3 on 4, then 4. */
export function defaultValidationWorkers(cores: number): number {
  return Math.min(4, Math.max(2, cores - 1));
}
