// The shape of the code, checked:
// - no module imports itself back through a circle of imports (a circle
//   makes the load order decide what is defined when, and ties layers
//   together that should stand alone);
// - a batch Worker loads none of the main thread's machinery (the
//   scheduler, the config, the app): each module a Worker loads costs it
//   memory, and the main thread's state is not the Worker's;
// - config.ts imports no feature folder (the features read the config, not
//   the other way round);
// - no file of src/ is over 400 lines without saying why at its top.
// Type-only imports are left out: they vanish at run time.
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const SRC = resolve(import.meta.dir, "../src");

/** Every .ts file under `dir` (the browser console's own code aside: another program, built apart). */
function sources(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) {
      if (relative(SRC, p) !== join("console", "client")) sources(p, out);
    } else if (p.endsWith(".ts")) out.push(p);
  }
  return out;
}

/** The relative modules `file` imports (or re-exports) at run time. */
export function runtimeImports(file: string): string[] {
  const text = readFileSync(file, "utf8");
  const out: string[] = [];
  for (const m of text.matchAll(/^(?:import|export)\s+(type\s+)?(?:[^;"']*?\sfrom\s+)?["'](\.[^"']+)["']/gm)) {
    if (m[1]) continue;
    let p = resolve(dirname(file), m[2]!);
    if (!p.endsWith(".ts")) p = existsSync(`${p}.ts`) ? `${p}.ts` : join(p, "index.ts");
    out.push(p);
  }
  // Modules loaded later (await import("./x")) are loaded all the same.
  for (const m of text.matchAll(/\bimport\(\s*["'](\.[^"']+)["']\s*\)/g)) {
    let p = resolve(dirname(file), m[1]!);
    if (!p.endsWith(".ts")) p = existsSync(`${p}.ts`) ? `${p}.ts` : join(p, "index.ts");
    out.push(p);
  }
  return out;
}

/** Every module `entry` loads, itself included. */
function loadedBy(entry: string): Set<string> {
  const seen = new Set<string>();
  const todo = [entry];
  while (todo.length) {
    const f = todo.pop()!;
    if (seen.has(f) || !existsSync(f)) continue;
    seen.add(f);
    todo.push(...runtimeImports(f));
  }
  return seen;
}

/** The strongly connected components of more than one module (Tarjan): each is an import circle. */
export function importCircles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const circles: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    for (let w = ""; w !== v; ) {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    }
    if (component.length > 1) circles.push(component.sort());
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return circles;
}

describe("imports", () => {
  test("the circle finder finds a circle (a → b → c → a) and nothing in a line (d → e)", () => {
    const g = new Map([
      ["a", ["b"]],
      ["b", ["c"]],
      ["c", ["a", "d"]],
      ["d", ["e"]],
      ["e", []],
    ]);
    expect(importCircles(g)).toEqual([["a", "b", "c"]]);
  });

  test("no module of src/ imports itself back through other modules", () => {
    const graph = new Map(sources(SRC).map((f) => [f, runtimeImports(f)] as const));
    expect(graph.size).toBeGreaterThan(100);
    const circles = importCircles(graph).map((c) => c.map((f) => relative(SRC, f)));
    expect(circles).toEqual([]);
  });
});

describe("the config", () => {
  test("config.ts imports no feature folder: only what sits below every feature (its own config/, defaults, flags, thread settings, net/, scheduling/, a replica's id)", () => {
    // A replica's id is a leaf (it imports nothing): the config names its replicas with it.
    const below = (f: string) =>
      ["defaults.ts", "flags.ts", "threadSettings.ts", "inference/replicas/replicaId.ts"].includes(f) || ["config/", "net/", "scheduling/"].some((d) => f.startsWith(d));
    const imports = runtimeImports(join(SRC, "config.ts")).map((f) => relative(SRC, f));
    expect(imports.length).toBeGreaterThan(2);
    expect(imports.filter((f) => !below(f))).toEqual([]);
    // Nor does the settings table and its machinery.
    const own = readdirSync(join(SRC, "config")).filter((f) => f.endsWith(".ts"));
    expect(own).toContain("settings.ts");
    for (const f of own) expect(runtimeImports(join(SRC, "config", f)).map((i) => relative(SRC, i)).filter((i) => !below(i))).toEqual([]);
  });
});

describe("threads", () => {
  test("a batch Worker loads neither the scheduler, nor the config, nor the app", () => {
    const loaded = [...loadedBy(join(SRC, "batches/worker/entry.ts"))].map((f) => relative(SRC, f));
    expect(loaded.length).toBeGreaterThan(10);
    expect(loaded).toContain("inference/admission/slotCells.ts");
    expect(loaded.filter((f) => ["inference/admission/scheduler.ts", "config.ts", "app.ts", "server.ts"].includes(f))).toEqual([]);
  });
});

/** A file's first comment: its leading lines of // comments. */
function headerOf(text: string): string {
  const lines = text.split("\n");
  const end = lines.findIndex((l) => !l.startsWith("//"));
  return lines.slice(0, end < 0 ? lines.length : end).join("\n");
}

/** Files still to be split by concern: none now. None may join them. */
const NOT_YET_SPLIT = new Set<string>();

describe("files", () => {
  test("no file of src/ is over 400 lines without a reason at its top ('Over 400 lines: …' in its first comment)", () => {
    const long = sources(SRC)
      .filter((f) => !NOT_YET_SPLIT.has(relative(SRC, f)))
      .map((f) => [relative(SRC, f), readFileSync(f, "utf8")] as const)
      .filter(([, text]) => text.split("\n").length > 400)
      .filter(([, text]) => !/^\/\/ Over 400 lines: \S/m.test(headerOf(text)))
      .map(([f, text]) => `${f}: ${text.split("\n").length} lines`);
    expect(long).toEqual([]);
  });
});
