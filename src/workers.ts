// Worker entry points, resolved relative to src/. This file sits beside
// main.ts on purpose: in the compiled executable every module shares the
// entry's import.meta.url, and `bun build --compile` keeps the worker
// entries' paths relative to src/ (see the build script), so one relative
// path works both from source and from the binary.
export const VALIDATE_WORKER = new URL("./jsonl/validate.worker.ts", import.meta.url);
export const BATCH_WORKER = new URL("./batches/worker/entry.ts", import.meta.url);
export const RETRY_WORKER = new URL("./batches/retry.worker.ts", import.meta.url);
export const CHECKPOINT_WORKER = new URL("./db/checkpoint.worker.ts", import.meta.url);
export const FRONT_WORKER = new URL("./http/front/entry.ts", import.meta.url);
export const LINES_WORKER = new URL("./anthropic/batches/lines.worker.ts", import.meta.url);
