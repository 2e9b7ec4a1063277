// offpeak files upload|list|get|download|rm
import { connection, dispatchVerb, helped, numberFlag, parseVerb, positionals } from "./args";
import { printJson, table, timeText } from "./format";
import { Client, type FileRecord, type List } from "./http";
import { Progress, formatBytes } from "./progress";

export const FILES_HELP = `offpeak files — files on a running offpeak server

Usage:
  offpeak files upload FILE [--purpose batch] [--expires-after SECONDS] [--quiet]
  offpeak files list [--purpose P] [--limit N] [--order asc|desc] [--after FILE_ID] [--json]
  offpeak files get FILE_ID
  offpeak files download FILE_ID [--out PATH]     (to stdout without --out)
  offpeak files rm FILE_ID

upload streams FILE from disk and prints the file record (JSON); a batch
file is checked line by line on the server and refused with the first bad
line. get prints the record; list prints a table (--json: the raw list).

Connection (every client command):
  --base-url URL   API base (env OFFPEAK_BASE_URL; default http://127.0.0.1:$PORT/v1, PORT else 8080)
  --api-key KEY    API key (env OFFPEAK_API_KEY, else OFFPEAK_ADMIN_KEY)

Exit codes: 0 done; 2 bad usage, server unreachable, or the server refused
the request (its message is printed).
`;

export function filesCommand(argv: string[]): Promise<number> {
  return dispatchVerb(argv, {
    name: "files",
    help: FILES_HELP,
    verbs: { upload, list, ls: list, get, download, rm, delete: rm },
    listed: "upload, list, get, download, rm",
  });
}

async function upload(argv: string[]): Promise<number> {
  const p = parseVerb(argv, { purpose: "string", "expires-after": "string", quiet: "boolean" });
  if (helped(p, FILES_HELP)) return 0;
  const [path] = positionals(p, ["FILE"], "offpeak files upload FILE [--purpose batch]");
  const client = new Client(connection(p));
  const expires = p.flags["expires-after"] !== undefined ? numberFlag(p, "expires-after", 0, 3600, 2592000) : undefined;
  const file = await uploadWithProgress(client, path!, p.flags.purpose ?? "batch", new Progress({ quiet: p.bools.quiet }), expires);
  printJson(file);
  return 0;
}

/** Uploads with a byte progress line (shared with `batch run`). */
export async function uploadWithProgress(client: Client, path: string, purpose: string, progress: Progress, expiresAfterSeconds?: number): Promise<FileRecord> {
  const file = await client.upload(path, purpose, {
    expiresAfterSeconds,
    onSent: (sent, total) => progress.update({ label: "uploading", done: sent, total, unit: "B" }),
  });
  progress.note(`uploaded ${path} → ${file.id} (${formatBytes(file.bytes)})`);
  return file;
}

async function list(argv: string[]): Promise<number> {
  const p = parseVerb(argv, { purpose: "string", limit: "string", order: "string", after: "string", json: "boolean" });
  if (helped(p, FILES_HELP)) return 0;
  positionals(p, [], "offpeak files list [--purpose P] [--limit N] [--order asc|desc] [--after FILE_ID] [--json]");
  const client = new Client(connection(p));
  const res = await client.json<List<FileRecord>>("GET", "/files", {
    query: { purpose: p.flags.purpose, limit: p.flags.limit, order: p.flags.order, after: p.flags.after },
  });
  if (p.bools.json) {
    printJson(res);
    return 0;
  }
  process.stdout.write(
    table(
      ["ID", "BYTES", "CREATED", "PURPOSE", "FILENAME"],
      res.data.map((f) => [f.id, String(f.bytes), timeText(f.created_at), f.purpose, f.filename]),
    ),
  );
  if (res.has_more) process.stderr.write(`(more: --after ${res.last_id})\n`);
  return 0;
}

async function get(argv: string[]): Promise<number> {
  const p = parseVerb(argv, {});
  if (helped(p, FILES_HELP)) return 0;
  const [id] = positionals(p, ["FILE_ID"], "offpeak files get FILE_ID");
  printJson(await new Client(connection(p)).json<FileRecord>("GET", `/files/${encodeURIComponent(id!)}`));
  return 0;
}

async function download(argv: string[]): Promise<number> {
  const p = parseVerb(argv, { out: "string" });
  if (helped(p, FILES_HELP)) return 0;
  const [id] = positionals(p, ["FILE_ID"], "offpeak files download FILE_ID [--out PATH]");
  const client = new Client(connection(p));
  const bytes = await client.download(id!, p.flags.out ?? null);
  if (p.flags.out) process.stderr.write(`downloaded ${id} → ${p.flags.out} (${formatBytes(bytes)})\n`);
  return 0;
}

async function rm(argv: string[]): Promise<number> {
  const p = parseVerb(argv, {});
  if (helped(p, FILES_HELP)) return 0;
  const [id] = positionals(p, ["FILE_ID"], "offpeak files rm FILE_ID");
  const res = await new Client(connection(p)).json<{ id: string; deleted: boolean }>("DELETE", `/files/${encodeURIComponent(id!)}`);
  process.stdout.write(`deleted ${res.id}\n`);
  return 0;
}
