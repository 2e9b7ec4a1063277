// A node's id is `name:pid:nonce` (the batch runner's lease owner): name is
// the host's name unless OFFPEAK_NODE_NAME says otherwise (config nodeName),
// and a new nonce per start makes a reused pid (pid 1 in containers) a new
// node still.
import { base62 } from "../ids";

export function newNodeId(name: string): string {
  return `${name.replaceAll(":", "_")}:${process.pid}:${base62(8)}`;
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
  // Same name, same machine (and pid namespace): names are per machine.
  if (host !== self.split(":")[0]) return false;
  if (Number(pid) === process.pid) return true;
  try {
    process.kill(Number(pid), 0);
    return false;
  } catch {
    return true;
  }
}
