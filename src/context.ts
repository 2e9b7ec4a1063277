import type { Config } from "./config";
import type { Db } from "./db/client";
import type { Logger } from "./log";
import type { BlobStore } from "./storage/blobStore";

/** What services need, built once at start and passed down (never Elysia's Context). */
export interface AppContext {
  config: Config;
  db: Db;
  store: BlobStore;
  log: Logger;
  startedAt: number;
}
