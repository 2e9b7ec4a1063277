import type { Config } from "./config";
import type { Db } from "./db/client";
import type { Logger } from "./log";
import type { BlobStore } from "./storage/blobStore";
import type { ModelRegistry } from "./inference/registry";
import type { Scheduler } from "./inference/admission/scheduler";
import type { RateLimiter } from "./inference/admission/rateLimit";
import type { Membership } from "./nodes/membership";

/** What services need, built once at start and passed down (never Elysia's Context). */
export interface AppContext {
  config: Config;
  db: Db;
  store: BlobStore;
  log: Logger;
  startedAt: number;
  registry: ModelRegistry;
  scheduler: Scheduler;
  rateLimiter: RateLimiter;
  /** The nodes on this database (this one alone on SQLite); set once the server has started its runner. */
  members: Membership | null;
  /** Wakes the batch runner after an API change (create, cancel). */
  kickBatches(): void;
}
