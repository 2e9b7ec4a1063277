// Starts offpeak on a resolved Config: opens the database, bootstraps the
// first key, serves HTTP, runs background sweeps, and shuts down cleanly.
import { buildHandler, withRequestId } from "./app";
import { observeRequests } from "./metrics/http";
import type { Config } from "./config";
import type { AppContext } from "./context";
import { openDb } from "./db/client";
import { sweepExpiredFiles } from "./files/service";
import { createKey, countKeys } from "./keys/service";
import { createLogger } from "./log";
import { LocalDiskStore } from "./storage/localDisk";
import { S3Store } from "./storage/s3";
import type { BlobStore } from "./storage/blobStore";
import { ModelRegistry } from "./inference/registry";
import { UpstreamMonitor } from "./inference/upstreamMonitor";
import { BatchRunner } from "./batches/runner";
import { sweepBatchLeftovers } from "./batches/finalize";
import { startEventLoopMonitor } from "./metrics/eventLoop";
import { batchEventsOf } from "./batches/events";
import { WebhookSender } from "./webhooks/sender";
import { Scheduler } from "./inference/scheduler";
import { RateLimiter } from "./inference/rateLimit";
import { Membership } from "./nodes/membership";
import { KeyUsageSync } from "./nodes/keyUsage";

export interface RunningServer {
  ctx: AppContext;
  port: number;
  url: string;
  /** Printed once when the first start made an admin key. */
  bootstrapKey: string | null;
  stop(): Promise<void>;
}

export async function startServer(config: Config, opts: { quiet?: boolean } = {}): Promise<RunningServer> {
  const log = createLogger(config.logLevel);
  const db = await openDb(config.database);
  const st = config.storage;
  const store: BlobStore =
    st.kind === "s3" ? new S3Store(st.s3, st.prefix, config.dataDir, { maxBlobBytes: config.maxFileBytes, log }) : new LocalDiskStore(config.dataDir);
  store.sweepTemporary();
  // A bucket that does not answer is reported, not fatal: interactive routes work without it (GET /status shows it).
  if (st.kind === "s3" && !(await store.probe())) log.error("the storage bucket does not answer at start", { storage: st.url });
  const health = new UpstreamMonitor(config.upstreams, log);
  const registry = new ModelRegistry(config, log, health);
  await registry.discover();
  let runner: BatchRunner | null = null;
  const ctx: AppContext = {
    config,
    db,
    store,
    log,
    startedAt: Date.now(),
    registry,
    scheduler: new Scheduler(),
    rateLimiter: new RateLimiter(),
    members: null,
    kickBatches: () => runner?.kick(),
  };
  runner = new BatchRunner(ctx, registry);
  const members = new Membership(ctx, runner.owner, () => runner!.liveShards);
  ctx.members = members;
  await members.start();
  // A limited model's max_concurrency is the cluster's: this node takes its part (an even split) at every heartbeat.
  members.afterBeat(() => {
    for (const m of registry.list()) if (m.maxConcurrency !== null) ctx.scheduler.setLimit(m, members.concurrencyShareOf(m.maxConcurrency));
  });
  // Per-key rpm/tpm for the cluster: only where other nodes can share the database.
  const keyUsage = db.engine === "postgres" ? new KeyUsageSync(ctx, members) : null;
  keyUsage?.start();
  const leftovers = () => sweepBatchLeftovers(ctx).catch((e) => log.error("batch leftovers sweep failed", { error: String(e) }));
  void leftovers();
  const stopLoopMonitor = startEventLoopMonitor();

  let bootstrapKey: string | null = null;
  if (!config.adminKey && (await countKeys(db)) === 0) {
    bootstrapKey = (await createKey(db, { name: "bootstrap admin", scopes: ["admin"] })).key;
    await db.syncCommits(); // on disk before it is shown
    if (!opts.quiet) process.stdout.write(`offpeak: created the first admin key (shown only once):\n${bootstrapKey}\n`);
  }

  const app = buildHandler(ctx);
  const server = Bun.serve({
    port: config.port,
    hostname: config.host,
    // Uploads are bounded by max_file_bytes in the handler, not here.
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    idleTimeout: 255,
    // Request metrics and the request log see every answer, also those made
    // before routing (401); every answer carries its x-request-id.
    fetch: observeRequests(ctx, app, withRequestId),
  });
  const sweep = setInterval(() => {
    sweepExpiredFiles(ctx).catch((e) => log.error("expired-file sweep failed", { error: String(e) }));
    // Upstream health and model lists; a failure marks the upstream's models unhealthy.
    registry.discover().catch(() => {});
    void leftovers();
  }, 60_000);
  sweep.unref?.();

  runner.start();
  const webhooks = new WebhookSender(ctx);
  webhooks.start();
  const url = `http://${config.host}:${server.port}`;
  log.info("listening", { url, data_dir: config.dataDir, storage: st.kind === "s3" ? st.url : "file:" });
  return {
    ctx,
    port: server.port!,
    url,
    bootstrapKey,
    async stop() {
      clearInterval(sweep);
      stopLoopMonitor();
      health.stop();
      batchEventsOf(ctx).close();
      await webhooks.stop();
      // Stop taking requests, then checkpoint batch work before closing the database.
      const closing = server.stop(true);
      await runner!.stop();
      await closing;
      keyUsage?.stop();
      await members.stop().catch((e) => log.error("node stop not recorded", { error: String(e) }));
      // On S3, removals and aborted uploads started before the stop are
      // requests to the bucket: let them finish, for at most a few seconds
      // (what is cut short is done at the next start). On disk, the trash is
      // emptied at the next start anyway.
      if (st.kind === "s3") await Promise.race([store.settled(), new Promise((r) => setTimeout(r, 5000).unref?.())]);
      await db.close();
      // Request lines are buffered (src/log.ts): every one of them goes out before stop() returns.
      log.flush();
    },
  };
}
