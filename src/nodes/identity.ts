// A node's id is `host:pid:nonce` (the batch runner's lease owner): a new
// nonce per start, so a reused pid (pid 1 in containers) is still a new node.
import { hostname } from "node:os";
import { base62 } from "../ids";

export function newNodeId(): string {
  return `${hostname()}:${process.pid}:${base62(8)}`;
}

/**
 * True if `id` names a process on this host that no longer runs (or an
 * earlier start of this very pid): it will never renew a lease or heartbeat
 * again, so there is no need to wait for them to lapse. Ids of other hosts
 * are never judged here: only their lease expiry tells.
 */
export function processGone(id: string, self: string): boolean {
  if (id === self) return false;
  const [host, pid] = id.split(":");
  if (host !== hostname()) return false;
  if (Number(pid) === process.pid) return true;
  try {
    process.kill(Number(pid), 0);
    return false;
  } catch {
    return true;
  }
}
