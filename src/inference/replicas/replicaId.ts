// A replica's id (docs/CONTRACT.md §21). A replica from the config, or found
// by DNS, is named by its upstream and URL, so that it keeps its id across
// restarts and every node of a cluster calls it the same: the state an
// operator sets on it (draining) is stored under that id. Imports nothing:
// the config resolves it.

export const REPLICA_PREFIX = "rep_";

export function replicaId(upstream: string, baseUrl: string): string {
  const h = new Bun.CryptoHasher("sha256").update(`${upstream}\n${baseUrl}`).digest("hex");
  return REPLICA_PREFIX + h.slice(0, 20);
}
