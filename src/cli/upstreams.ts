// offpeak upstreams list|add|drain|activate|remove (admin key): the replicas
// of a running server's upstreams (docs/CONTRACT.md §21), through the API
// (GET /upstreams, POST|PATCH|DELETE /upstreams/{name}/replicas…). A
// change is kept in the database, so every node of a cluster obeys it.
import { connection, dispatchVerb, helped, numberFlag, parseVerb, positionals, usageError } from "./args";
import { printJson, table } from "./format";
import { Client } from "./http";
import { prog } from "./program";

export const UPSTREAMS_HELP = `offpeak upstreams — the engines (replicas) of a running server's upstreams (admin key)

Usage:
  offpeak upstreams list [--json]
  offpeak upstreams add UPSTREAM BASE_URL [--weight N]
  offpeak upstreams drain UPSTREAM REPLICA
  offpeak upstreams activate UPSTREAM REPLICA
  offpeak upstreams remove UPSTREAM REPLICA

list prints each upstream's replicas: id, base URL, state (active,
draining, down), requests in flight and the limit, health, mean latency
(--json: the raw list). add puts another engine behind an upstream: it
takes work within seconds. drain stops new requests to a replica (what it
runs finishes); activate gives it work again; remove drains it, then it
leaves the set. REPLICA is its id (rep_…), a unique start of it, or its
base URL. add, drain, activate and remove print the replica (JSON).
Changes are kept in the database: every node obeys them within a second,
and they survive a restart.

Connection (every client command):
  --base-url URL   API base (env OFFPEAK_BASE_URL; default http://127.0.0.1:$PORT/v1, PORT else 8080)
  --api-key KEY    API key (env OFFPEAK_API_KEY, else OFFPEAK_ADMIN_KEY)

Exit codes: 0 done; 2 bad usage, server unreachable, or the server refused
the request (its message is printed: an unknown upstream or replica, a key
without the admin scope).
`;

interface Replica {
  id: string;
  base_url: string;
  weight: number;
  state: "active" | "draining" | "down";
  source: string;
  in_flight: number;
  concurrency_limit: number | null;
  healthy: boolean;
  latency_ms?: number | null;
}

interface Upstream {
  name: string;
  engine: string | null;
  models: string[];
  replicas: Replica[];
}

export function upstreamsCommand(argv: string[]): Promise<number> {
  return dispatchVerb(argv, {
    name: "upstreams",
    help: UPSTREAMS_HELP,
    verbs: { list, ls: list, add, drain, activate, remove, rm: remove },
    listed: "list, add, drain, activate, remove",
  });
}

async function list(argv: string[]): Promise<number> {
  const p = parseVerb(argv, { json: "boolean" });
  if (helped(p, UPSTREAMS_HELP)) return 0;
  positionals(p, [], "offpeak upstreams list [--json]");
  const res = await new Client(connection(p)).json<{ data: Upstream[] }>("GET", "/upstreams");
  if (p.bools.json) {
    printJson(res);
    return 0;
  }
  const rows = res.data.flatMap((u) =>
    u.replicas.map((r) => [
      u.name,
      r.id,
      r.base_url,
      r.state,
      String(r.in_flight),
      r.concurrency_limit === null ? "-" : String(r.concurrency_limit),
      r.healthy ? "yes" : "no",
      r.latency_ms == null ? "-" : `${r.latency_ms} ms`,
    ]),
  );
  process.stdout.write(table(["UPSTREAM", "REPLICA", "BASE_URL", "STATE", "IN_FLIGHT", "LIMIT", "HEALTHY", "LATENCY"], rows));
  if (res.data.length === 0) process.stderr.write("(no upstreams configured: requests run on the built-in models)\n");
  return 0;
}

async function add(argv: string[]): Promise<number> {
  const p = parseVerb(argv, { weight: "string" });
  if (helped(p, UPSTREAMS_HELP)) return 0;
  const [name, baseUrl] = positionals(p, ["UPSTREAM", "BASE_URL"], "offpeak upstreams add UPSTREAM BASE_URL [--weight N]");
  // The range (above 0, at most 1000) is the server's to say.
  const weight = p.flags.weight !== undefined ? numberFlag(p, "weight", 1, 0) : undefined;
  const replica = await new Client(connection(p)).json<Replica>("POST", `/upstreams/${encodeURIComponent(name!)}/replicas`, {
    json: { base_url: baseUrl, ...(weight !== undefined ? { weight } : {}) },
  });
  printJson(replica);
  process.stderr.write(`added ${replica.id} to ${name}: it takes work within seconds\n`);
  return 0;
}

const drain = (argv: string[]) => changeState(argv, "drain", "draining", "draining: no new requests; what it runs finishes");
const activate = (argv: string[]) => changeState(argv, "activate", "active", "active: it takes work again");

async function changeState(argv: string[], verb: string, state: "draining" | "active", note: string): Promise<number> {
  const p = parseVerb(argv, {});
  if (helped(p, UPSTREAMS_HELP)) return 0;
  const [name, ref] = positionals(p, ["UPSTREAM", "REPLICA"], `offpeak upstreams ${verb} UPSTREAM REPLICA`);
  const client = new Client(connection(p));
  const id = await replicaIdOf(client, name!, ref!);
  const replica = await client.json<Replica>("PATCH", replicaPath(name!, id), { json: { state } });
  printJson(replica);
  process.stderr.write(`${replica.id} ${note}\n`);
  return 0;
}

async function remove(argv: string[]): Promise<number> {
  const p = parseVerb(argv, {});
  if (helped(p, UPSTREAMS_HELP)) return 0;
  const [name, ref] = positionals(p, ["UPSTREAM", "REPLICA"], "offpeak upstreams remove UPSTREAM REPLICA");
  const client = new Client(connection(p));
  const id = await replicaIdOf(client, name!, ref!);
  printJson(await client.json("DELETE", replicaPath(name!, id)));
  process.stderr.write(`${id} removed from ${name}: it drains, then leaves the set\n`);
  return 0;
}

const replicaPath = (name: string, id: string) => `/upstreams/${encodeURIComponent(name)}/replicas/${encodeURIComponent(id)}`;

/** A full id goes as given (the server says whether it exists); a start of one or a base URL is looked up in the listing. */
async function replicaIdOf(client: Client, name: string, ref: string): Promise<string> {
  if (/^rep_[0-9a-f]{20}$/.test(ref)) return ref;
  const res = await client.json<{ data: Upstream[] }>("GET", "/upstreams");
  const u = res.data.find((x) => x.name === name);
  if (!u) throw usageError(`no upstream named ${name} (${res.data.map((x) => x.name).join(", ") || "none configured"})`);
  const url = ref.replace(/\/+$/, "");
  const matches = u.replicas.filter((r) => r.base_url === url || r.id.startsWith(ref));
  if (matches.length === 1) return matches[0]!.id;
  if (matches.length === 0) throw usageError(`upstream ${name} has no replica ${ref} (see ${prog()} upstreams list)`);
  throw usageError(`${ref} names ${matches.length} replicas of ${name}: give more of the id`);
}
