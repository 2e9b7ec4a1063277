// The scope each API route needs, decided from the method and path alone so
// that onRequest can answer 403 before the body is parsed or validated: a
// key without the scope learns nothing about what its body would have done
// (docs/CONTRACT.md §2: a valid key without the needed scope gets 403). This is the
// only place a route's scope is decided (the auth tests check every route
// with and without it).
import { ENDPOINT_KINDS } from "../endpoints";
import type { Scope } from "./scopes";

/** The first path segment of every endpoint kind's route ("chat", "embeddings", …): scope inference. */
const INFERENCE_RESOURCES = new Set(ENDPOINT_KINDS.map((k) => k.path.split("/")[1]!));

/** `path` is the part after the API base, e.g. "/files/file-abc/content". null: any valid key. */
export function routeScope(method: string, path: string): Scope | null {
  const end = path.indexOf("/", 1);
  const resource = end === -1 ? path.slice(1) : path.slice(1, end);
  const read = method === "GET" || method === "HEAD";
  if (INFERENCE_RESOURCES.has(resource)) return "inference";
  switch (resource) {
    case "files":
      return read ? "files:read" : "files:write";
    case "uploads":
      // OpenAI's Uploads have no GET: every route makes or changes a file.
      return "files:write";
    case "batches":
      return read ? "batches:read" : "batches:write";
    case "models":
    case "chats":
      return "inference";
    case "messages":
      // Anthropic's routes (docs/CONTRACT.md §22): its Message Batches are batches, the rest inference.
      if (path.startsWith("/messages/batches") && (path.length === 17 || path.charCodeAt(17) === 47)) return read ? "batches:read" : "batches:write";
      return "inference";
    case "keys":
    case "metrics":
    case "upstreams":
    case "webhook_endpoints":
      return "admin";
    default:
      // /status needs only a valid key; unknown routes answer 404.
      return null;
  }
}
