// offpeak webhooks create|list|rm (admin key): the webhook endpoints of a
// running server (docs/CONTRACT.md §12).
import { connection, dispatchVerb, helped, parseVerb, positionals } from "./args";
import { printJson, table, timeText } from "./format";
import { Client, type List } from "./http";

export const WEBHOOKS_HELP = `offpeak webhooks — webhook endpoints on a running offpeak server (admin key)

Usage:
  offpeak webhooks create URL [--events batch.completed,batch.failed,...] [--project P]
  offpeak webhooks list [--project P] [--json]
  offpeak webhooks rm ENDPOINT_ID

create prints the endpoint with its signing secret (whsec_…), shown only
this once: verify deliveries with it (the official SDKs'
client.webhooks.unwrap). Events: batch.completed, batch.failed,
batch.cancelled, batch.expired (default: all).

Connection (every client command):
  --base-url URL   API base (env OFFPEAK_BASE_URL; default http://127.0.0.1:$PORT/v1, PORT else 8080)
  --api-key KEY    API key (env OFFPEAK_API_KEY, else OFFPEAK_ADMIN_KEY)

Exit codes: 0 done; 2 bad usage, server unreachable, or the server refused
the request (its message is printed).
`;

interface Endpoint {
  id: string;
  url: string;
  events: string[];
  project: string;
  created_at: number;
}

export function webhooksCommand(argv: string[]): Promise<number> {
  return dispatchVerb(argv, {
    name: "webhooks",
    help: WEBHOOKS_HELP,
    verbs: { create, list, ls: list, rm, delete: rm },
    listed: "create, list, rm",
  });
}

async function create(argv: string[]): Promise<number> {
  const p = parseVerb(argv, { events: "string", project: "string" });
  if (helped(p, WEBHOOKS_HELP)) return 0;
  const [url] = positionals(p, ["URL"], "offpeak webhooks create URL [--events a,b] [--project P]");
  const events = p.flags.events?.split(",").map((e) => e.trim()).filter(Boolean);
  printJson(await new Client(connection(p)).json("POST", "/webhook_endpoints", { json: { url, ...(events ? { events } : {}), ...(p.flags.project ? { project: p.flags.project } : {}) } }));
  return 0;
}

async function list(argv: string[]): Promise<number> {
  const p = parseVerb(argv, { project: "string", json: "boolean" });
  if (helped(p, WEBHOOKS_HELP)) return 0;
  positionals(p, [], "offpeak webhooks list [--project P] [--json]");
  const res = await new Client(connection(p)).json<List<Endpoint>>("GET", "/webhook_endpoints", { query: { project: p.flags.project } });
  if (p.bools.json) {
    printJson(res);
    return 0;
  }
  process.stdout.write(table(["ID", "PROJECT", "EVENTS", "CREATED", "URL"], res.data.map((e) => [e.id, e.project, e.events.join(","), timeText(e.created_at), e.url])));
  return 0;
}

async function rm(argv: string[]): Promise<number> {
  const p = parseVerb(argv, {});
  if (helped(p, WEBHOOKS_HELP)) return 0;
  const [id] = positionals(p, ["ENDPOINT_ID"], "offpeak webhooks rm ENDPOINT_ID");
  printJson(await new Client(connection(p)).json("DELETE", `/webhook_endpoints/${encodeURIComponent(id!)}`));
  return 0;
}
