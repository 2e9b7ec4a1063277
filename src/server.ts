// Starts offpeak on a resolved Config: opens the database, bootstraps the
// first key, serves HTTP, runs background sweeps, and shuts down cleanly.
import { API_BASES, buildHandler, withRequestId } from "./app";
import { observeRequests, requestObserver } from "./metrics/http";
import { startFrontThreads } from "./http/front/desk";
import type { Config } from "./config";
import type { AppContext } from "./context";
import { openDb } from "./db/client";
import { sweepExpiredFiles } from "./files/service";
import { sweepExpiredUploads } from "./uploads/service";
import { sweepIdempotencyKeys } from "./idempotency";
import { createKey, countKeys } from "./keys/service";
import { createLogger } from "./log";
import { secureDataDir } from "./dataDir";
import { LocalDiskStore } from "./storage/localDisk";
import { S3Store } from "./storage/s3";
import type { BlobStore } from "./storage/blobStore";
import { ModelRegistry } from "./inference/registry";
import { UpstreamMonitor } from "./inference/upstream/monitor";
import { ReplicaLimits } from "./inference/replicas/limits";
import { ReplicaSets } from "./inference/replicas/set";
import { BatchRunner } from "./batches/runner";
import { sweepBatchLeftovers } from "./batches/finalize";
import { startEventLoopMonitor } from "./metrics/eventLoop";
import { batchEventsOf } from "./batches/events";
import { WebhookSender } from "./webhooks/sender";
import { Scheduler } from "./inference/admission/scheduler";
import { ClusterBudget } from "./inference/admission/clusterBudget";
import { LocalLimiter } from "./inference/admission/localLimiter";
import { Membership } from "./nodes/membership";
import { KeyUsageSync } from "./nodes/keyUsage";
import { watchRevocations } from "./auth/revocations";
import { framed, startBanner } from "./banner";
import { prog } from "./cli/program";
import pkg from "../package.json";

export interface RunningServer {
  ctx: AppContext;
  port: number;
  url: string;
  /** Printed once when the first start made an admin key. */
  bootstrapKey: string | null;
  stop(): Promise<void>;
}

export async function startServer(
  config: Config,
  opts: {
    quiet?: boolean;
    /** Tests only: the webhook sender's clock (ms since the epoch), to reach its 72 h give-up without waiting. */
    webhookClock?: () => number;
  } = {},
): Promise<RunningServer> {
  const log = createLogger(config.logLevel);
  // Before anything is created in it: 0700 and 0600 from here on (docs/CONTRACT.md §16; src/dataDir.ts).
  const openPaths = secureDataDir(config.dataDir, config.database);
  const listed = (tightened: boolean) => openPaths.filter((p) => p.tightened === tightened).map((p) => `${p.path} (was ${p.was})`);
  if (listed(true).length > 0) log.warn("data directory was open to other users: tightened", { paths: listed(true) });
  if (listed(false).length > 0) log.warn("data directory is open to other users and could not be tightened: chmod it yourself", { paths: listed(false) });
  // A Postgres that does not answer yet is waited for (logged at each try), up to database.start_wait_s.
  const db = await openDb(config.database, { wait: { ms: config.databaseStartWaitMs, log: (msg, fields) => log.warn(msg, fields) } });
  // Keys revoked by other nodes or the keys CLI: their open streams here end too (docs/CONTRACT.md §16).
  const stopRevocations = watchRevocations(db);
  const st = config.storage;
  const store: BlobStore =
    st.kind === "s3" ? new S3Store(st.s3, st.prefix, config.dataDir, { maxBlobBytes: config.maxFileBytes, log }) : new LocalDiskStore(config.dataDir);
  store.sweepTemporary();
  // A bucket that does not answer is reported, not fatal: interactive routes work without it (GET /status shows it).
  if (st.kind === "s3" && !(await store.probe())) log.error("the storage bucket does not answer at start", { storage: st.url });
  const health = new UpstreamMonitor(config.upstreams, log);
  // Each upstream's engines (docs/CONTRACT.md §21): the config's, and those the API added, read from the database.
  const replicas = new ReplicaSets(config.upstreams, db, config.upstreamClient, log);
  await replicas.start();
  health.urlsOf = (u) => replicas.urlsOf(u.name);
  const registry = new ModelRegistry(config, log, health, replicas);
  await registry.discover();
  let runner: BatchRunner | null = null;
  // Per-key rpm/tpm: counted here alone with SQLite (one node); with Postgres other nodes share the database, and each key's budget in it.
  const windowMs = config.rateLimitMinuteSeconds * 1000;
  const clusterBudget = db.engine === "postgres" ? new ClusterBudget(windowMs) : null;
  // "auto" models with several replicas: each replica's controller finds its limit, the model's is their sum.
  const scheduler = new Scheduler();
  scheduler.replicaLimits = new ReplicaLimits(replicas);
  const ctx: AppContext = {
    config,
    db,
    store,
    log,
    startedAt: Date.now(),
    registry,
    scheduler,
    rateLimiter: clusterBudget ?? new LocalLimiter(windowMs),
    members: null,
    kickBatches: () => runner?.kick(),
  };
  runner = new BatchRunner(ctx, registry);
  const members = new Membership(ctx, runner.owner, () => runner!.liveShards);
  ctx.members = members;
  await members.start();
  // A limited model's max_concurrency is the cluster's: this node takes its part (an even split) at every heartbeat.
  // So is the peak cap: the odd slots of it go to the nodes in turn, a minute each.
  members.afterBeat(() => {
    for (const m of registry.list()) if (m.maxConcurrency !== null) ctx.scheduler.setLimit(m, members.concurrencyShareOf(m.maxConcurrency));
    const { index, count } = members.place();
    ctx.scheduler.setPlace(index, count, Math.floor(Date.now() / 60_000));
  });
  // Per-key rpm/tpm for the cluster: only where other nodes can share the database.
  const keyUsage = clusterBudget ? new KeyUsageSync(ctx, members, clusterBudget) : null;
  keyUsage?.start();
  const leftovers = () => sweepBatchLeftovers(ctx).catch((e) => log.error("batch leftovers sweep failed", { error: String(e) }));
  void leftovers();
  const stopLoopMonitor = startEventLoopMonitor();

  // Shown once, framed, in the banner below, when the server answers.
  let bootstrapKey: string | null = null;
  if (!config.adminKey && (await countKeys(db)) === 0) {
    bootstrapKey = (await createKey(db, { name: "bootstrap admin", scopes: ["admin"] })).key;
    await db.syncCommits(); // on disk before it is shown
  }

  const app = buildHandler(ctx);
  // Request metrics and the request log see every answer, also those made
  // before routing (401); every answer carries its x-request-id.
  const observe = requestObserver(ctx, app.routes);
  const handler = { fetch: observeRequests(observe, app.fetch, withRequestId) };
  const threads = config.httpThreads;
  // Uploads are bounded by max_file_bytes in the handler, not by Bun.serve's body size.
  const listen = () => Bun.serve({ port: config.port, hostname: config.host, maxRequestBodySize: Number.MAX_SAFE_INTEGER, idleTimeout: 255, fetch: handler.fetch });
  // With front threads (docs/CONTRACT.md §20) they are the listeners, on a port they
  // share (SO_REUSEPORT), and this thread serves only what they relay. The
  // port is bound here first, plainly, and let go: so a taken port fails as
  // it would without them (a shared one would let a second offpeak start
  // on it), and port 0 becomes the port they take.
  const server = listenOrShowKey(bootstrapKey, opts.quiet, () => {
    if (threads === 0) return listen();
    const probe = listen();
    const port = probe.port!;
    probe.stop(true);
    return { port, stop: async (_closeActive?: boolean) => {} };
  });
  const fronts =
    threads > 0
      ? await startFrontThreads(ctx, { count: threads, port: server.port!, hostname: config.host, handler, hooks: app.hooks, observe, fastPaths: API_BASES.map((b) => b + "/chat/completions") })
      : null;
  const sweep = setInterval(() => {
    sweepExpiredFiles(ctx).catch((e) => log.error("expired-file sweep failed", { error: String(e) }));
    sweepExpiredUploads(ctx).catch((e) => log.error("expired-upload sweep failed", { error: String(e) }));
    sweepIdempotencyKeys(ctx).catch((e) => log.error("idempotency key sweep failed", { error: String(e) }));
    // Upstream health and model lists; a failure marks the upstream's models unhealthy.
    registry.discover().catch(() => {});
    void leftovers();
  }, 60_000);
  sweep.unref?.();

  runner.start();
  const webhooks = new WebhookSender(ctx, { clock: opts.webhookClock });
  webhooks.start();
  const url = `http://${config.host}:${server.port}`;
  // For people, on stdout, before the JSON log lines (stderr) of what follows: docs/CONTRACT.md §19.
  if (!opts.quiet)
    process.stdout.write(
      startBanner({
        version: pkg.version,
        host: config.host,
        port: server.port!,
        dataDir: config.dataDir,
        database: config.database,
        storageUrl: st.kind === "s3" ? st.url : "file:",
        bootstrapKey,
        envAdminKey: !!config.adminKey,
        cli: prog(),
      }),
    );
  log.info("listening", { url, data_dir: config.dataDir, storage: st.kind === "s3" ? st.url : "file:" });
  return {
    ctx,
    port: server.port!,
    url,
    bootstrapKey,
    async stop() {
      clearInterval(sweep);
      ctx.scheduler.stop();
      stopLoopMonitor();
      health.stop();
      replicas.stop();
      batchEventsOf(ctx).close();
      await webhooks.stop();
      // Stop taking requests, then checkpoint batch work before closing the database.
      await fronts?.stop();
      const closing = server.stop(true);
      await runner!.stop();
      await closing;
      keyUsage?.stop();
      await members.stop().catch((e) => log.error("node stop not recorded", { error: String(e) }));
      stopRevocations();
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

/**
 * Bun.serve, and if it fails (the port is taken), the first start's key on
 * stdout before the error: it is in the database now, and no later start
 * would show it again.
 */
function listenOrShowKey<T>(bootstrapKey: string | null, quiet: boolean | undefined, listen: () => T): T {
  try {
    return listen();
  } catch (e) {
    if (bootstrapKey && !quiet) process.stdout.write(`\n${framed(["The server could not start, but an admin key was made:", "it is shown only this once: keep it somewhere safe.", "", `  ${bootstrapKey}`])}\n`);
    throw e;
  }
}
