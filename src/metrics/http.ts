// Observes every HTTP request from outside the framework: wraps the app's
// fetch so that the exact status of every answer is seen (also the 401s that
// authentication throws before routing, and the errors onError maps), then
// counts it by route pattern and writes one JSON log line.
//
// The route label comes from a trie of the app's own route patterns, not from
// the raw path: label values must stay bounded (ids in paths would make a new
// series per file). A request no route matches is labelled "unmatched".
import type { AppContext } from "../context";
import { pathOf } from "../http/path";
import { m } from "./index";
import { requestMembers, routeMembers } from "./requestLine";

interface Node {
  statics: Map<string, Node>;
  param: Node | null;
  /** Pattern of a trailing `*` route here, by method. */
  wildcard: Map<string, string> | null;
  /** Pattern ending exactly here, by method. */
  end: Map<string, string> | null;
}

const node = (): Node => ({ statics: new Map(), param: null, wildcard: null, end: null });

const segmentsOf = (path: string) => path.split("/").filter((s) => s !== "");

export type RouteMatcher = (method: string, path: string) => string;

/** Builds a matcher from route patterns like "/api/v1/files/:id" and "/api/v1/models/*". */
export function routeMatcher(routes: readonly { method: string; path: string }[]): RouteMatcher {
  const root = node();
  for (const r of routes) {
    let n = root;
    const segs = segmentsOf(r.path);
    let wildcard = false;
    for (const s of segs) {
      if (s === "*") {
        wildcard = true;
        break;
      }
      if (s.startsWith(":")) n = n.param ??= node();
      else {
        let next = n.statics.get(s);
        if (!next) n.statics.set(s, (next = node()));
        n = next;
      }
    }
    const method = r.method.toUpperCase();
    if (wildcard) (n.wildcard ??= new Map()).set(method, r.path);
    else if (!(n.end ??= new Map()).has(method)) n.end.set(method, r.path);
  }
  const pick = (byMethod: Map<string, string> | null, method: string) =>
    byMethod ? (byMethod.get(method) ?? byMethod.get("ALL") ?? (method === "HEAD" ? byMethod.get("GET") : undefined)) : undefined;
  const find = (n: Node, segs: string[], i: number, method: string): string | undefined => {
    if (i === segs.length) return pick(n.end, method) ?? pick(n.wildcard, method);
    const s = n.statics.get(segs[i]!);
    const viaStatic = s && find(s, segs, i + 1, method);
    if (viaStatic) return viaStatic;
    const viaParam = n.param && find(n.param, segs, i + 1, method);
    if (viaParam) return viaParam;
    return pick(n.wildcard, method);
  };
  // Not memoised here: observeRequests keeps each method and path's answer
  // with the rest of what it needs for them (RouteSeen).
  return (method, path) => find(root, segmentsOf(path), 0, method) ?? "unmatched";
}

type Fetch = (request: Request, server?: PeerAddress) => Response | Promise<Response>;

type Level = "debug" | "info" | "warn";

/** Counts a request and observes its duration: bound once per method, route and status (all bounded sets). */
const recorders = new Map<string, (seconds: number) => void>();
function recorderOf(method: string, pattern: string, status: number): (seconds: number) => void {
  const key = method + " " + pattern + " " + status;
  let record = recorders.get(key);
  if (!record) {
    const count = m.httpRequests.bind([method, pattern, String(status)]);
    const observe = m.httpDuration.bind([method, pattern]);
    record = (seconds) => {
      count();
      observe(seconds);
    };
    if (recorders.size < 4096) recorders.set(key, record);
  }
  return record;
}

/** What a request's method and path mean for metrics and the log, kept per method and path. */
interface RouteSeen {
  pattern: string;
  /** Its recorders by status. */
  byStatus: Map<number, (seconds: number) => void>;
  /** The request line's method, route and path members, made when first logged. */
  members: string | undefined;
}

export type PeerAddress = { requestIP(r: Request): { address: string } | null };

/** Counts one answered request and writes its log line. */
export type RequestObserver = (request: Request, server: PeerAddress | undefined, status: number, seconds: number) => void;

/**
 * The request metrics and the request log for the app's routes: what
 * observeRequests calls for every answer, and what the main thread calls
 * for the requests front threads answered (src/http/front).
 */
export function requestObserver(ctx: AppContext, routes: readonly { method: string; path: string }[]): RequestObserver {
  const route = routeMatcher(routes);
  const log = ctx.log;
  const everyClient = ctx.config.logClientAddress === "always";
  // Most traffic is a few method-and-path pairs: one lookup each finds the
  // route, its recorders and its log members (bounded: paths with ids rarely repeat).
  const seen = new Map<string, RouteSeen>();
  const seenOf = (method: string, path: string): RouteSeen => {
    const key = method + " " + path;
    let s = seen.get(key);
    if (!s) {
      s = { pattern: route(method, path), byStatus: new Map(), members: undefined };
      if (seen.size >= 1024) seen.clear();
      seen.set(key, s);
    }
    return s;
  };
  return (request, server, status, seconds) => {
    const method = request.method;
    const path = pathOf(request.url);
    const s = seenOf(method, path);
    const pattern = s.pattern;
    let record = s.byStatus.get(status);
    if (!record) s.byStatus.set(status, (record = recorderOf(method, pattern, status)));
    record(seconds);
    // Liveness probes would drown everything else; overload (529) is expected backpressure.
    const level: Level = pattern === "/healthz" ? "debug" : status >= 500 && status !== 529 ? "warn" : "info";
    // Build the line only if it is written: at high request rates this is measurable.
    if (log.enabled(level)) {
      const members = (s.members ??= routeMembers(method, pattern, path));
      log.members(level, "request", requestMembers(request, server, pattern, path, status, seconds, everyClient, members));
    }
  };
}

/**
 * Wraps the app's fetch with request metrics and the request log
 * (`observe`, from requestObserver). `finish`, if given, decorates each
 * answer first (the request id): in this one async layer rather than
 * another around it.
 */
export function observeRequests(
  observe: RequestObserver,
  inner: (request: Request) => Response | Promise<Response>,
  finish: (request: Request, res: Response) => Response = (_, res) => res,
): Fetch {
  return async (request, server) => {
    const t0 = performance.now();
    let status = 500;
    try {
      const res = finish(request, await inner(request));
      status = res.status;
      return res;
    } finally {
      observe(request, server, status, (performance.now() - t0) / 1000);
    }
  };
}
