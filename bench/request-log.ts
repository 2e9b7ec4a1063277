// What one request line costs the HTTP thread, without HTTP around it: the
// line as the server builds it (src/metrics/requestLine.ts: JSON members
// written directly, repeating parts memoised) beside the same line built the
// generic way (a fields object, JSON.stringify, the secret scan of
// `redact`), both through the same logger and buffered sink into /dev/null.
// `requestIP` is a stand-in here (the real call is a getpeername: ≈1.6 µs
// measured with wrk, see docs/benchmarks/history.md, "Chat completions
// through a proxy"): what is left is the line itself.
// Usage: bun bench/request-log.ts [lines-per-round=500000] [rounds=7]
import { openSync } from "node:fs";
import { BufferedFdSink, createLogger } from "../src/log";
import { requestMembers, redactPath, routeMembers } from "../src/metrics/requestLine";
import { principals } from "../src/auth/plugin";
import { peakRssMb } from "./lib";

const N = Number(process.argv[2] ?? 500_000);
const ROUNDS = Number(process.argv[3] ?? 7);
const log = createLogger("info", new BufferedFdSink(openSync("/dev/null", "w")));
const principal = { keyId: "key_5kq3Xb0cVnYtq3XwJ1YQ2r4B", project: "team-a", scopes: ["inference"], rpm: null, tpm: null };
const requests = Array.from({ length: 64 }, () => {
  const r = new Request("http://127.0.0.1:8080/api/v1/chat/completions", { method: "POST" });
  principals.set(r, principal);
  return r;
});
const server = { requestIP: () => ({ address: "10.0.0.7" }) };
const path = "/api/v1/chat/completions";

// As the server calls it (src/metrics/http.ts): the route's members made
// once per method and path, the client's address not asked on a line with a
// key (config logClientAddress "unauthenticated", the default).
const route = routeMembers("POST", path, path);
function direct(i: number) {
  log.members("info", "request", requestMembers(requests[i & 63]!, server, path, path, 200, 0.00123 + i * 1e-9, false, route));
}

/** The generic way: a fields object through info(), which stringifies and redacts it. */
function generic(i: number) {
  const request = requests[i & 63]!;
  const p = principals.get(request)!;
  log.info("request", {
    request_id: "req_0000000000000000000000AB",
    method: request.method,
    route: path,
    path: redactPath(path),
    status: 200,
    duration_ms: Math.round((0.00123 + i * 1e-9) * 100_000) / 100,
    key_id: p.keyId,
    project: p.project,
    client: server.requestIP().address,
  });
}

function round(f: (i: number) => void): number {
  const t0 = performance.now();
  for (let i = 0; i < N; i++) f(i);
  log.flush();
  return ((performance.now() - t0) * 1e6) / N;
}

const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const a: number[] = [];
const b: number[] = [];
round(direct); // warm-up
round(generic);
for (let r = 0; r < ROUNDS; r++) {
  // Alternate which goes first.
  if (r % 2) {
    b.push(round(generic));
    a.push(round(direct));
  } else {
    a.push(round(direct));
    b.push(round(generic));
  }
}
console.log(`request line, direct JSON members: median ${med(a).toFixed(0)} ns/line (${a.map((x) => x.toFixed(0)).join(", ")})`);
console.log(`request line, fields object (generic): median ${med(b).toFixed(0)} ns/line (${b.map((x) => x.toFixed(0)).join(", ")})`);
console.log(`ratio: ${(med(a) / med(b)).toFixed(2)}× the time; ${N} lines per round, ${ROUNDS} rounds; peak RSS ${peakRssMb(process.pid).toFixed(0)} MB`);
