// Defaults that depend on the machine (its usable cores), and limits that
// threads which never load the config read too. It imports nothing of
// offpeak's: the config resolves settings from it, and batch Workers and
// front threads load it without loading the config.
import { availableParallelism } from "node:os";

/** Cores this process may run on (its CPU affinity: a container's cpuset, not the host's count). */
export function usableCores(): number {
  return availableParallelism();
}

/**
 * Past 8, more batch Workers made a 1M-line echo batch no faster on a
 * 16-core machine, while each added to peak RSS (as reported with docs/CONTRACT.md §20);
 * on 2 cores, Workers past the cores made it no faster (docs/OPERATING.md,
 * "Batch Workers"). The turns are capped the same way: memory bounded
 * however many cores the machine has.
 */
export const MAX_DEFAULT_BATCH_WORKERS = 8;

/** The default number of batch Workers, and of turns at the CPU, for `cores` usable cores: one per core, at most 8. */
export function defaultBatchWorkers(cores: number): number {
  return Math.max(1, Math.min(Math.floor(cores) || 1, MAX_DEFAULT_BATCH_WORKERS));
}

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

/**
 * Front threads by default: none, whatever the cores (configurable with
 * server.http_threads / OFFPEAK_HTTP_THREADS). On 2 cores the main thread
 * alone holds the chat pass-through above a naive proxy and front threads
 * compete with it for the same cores (0.68–0.83× the naive proxy with 1–4
 * of them; docs/OPERATING.md "HTTP threads"); on a many-core machine they
 * may help (they take a request's socket and byte work off the main
 * thread), but no such machine has measured a gain, so they stay an
 * operator's choice until one does.
 */
export function defaultHttpThreads(_cores: number): number {
  return 0;
}

/**
 * limits.max_json_bytes unless configured (docs/CONTRACT.md §16), 32 MiB: far above any
 * real chat or embeddings request, far below what a hostile body could make
 * the server hold. Front threads read bodies without loading the config.
 */
export const DEFAULT_MAX_JSON_BYTES = 32 << 20;
