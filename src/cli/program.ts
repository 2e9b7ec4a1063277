// How the person ran offpeak, so that the commands the CLI prints (hints
// after Ctrl-C or --timeout, usage lines, help) run as written: from a
// checkout that is `npx offpeak` (package.json "bin" → bin/offpeak), from
// the compiled executable its name (on PATH) or its path.
import { existsSync } from "node:fs";
import { basename, isAbsolute, join, relative, resolve } from "node:path";

/** The checkout's root when running from source (src/cli/ is two levels down). */
const SOURCE_ROOT = resolve(import.meta.dir, "..", "..");

const inside = (dir: string, root: string) => {
  const rel = relative(root, dir);
  return rel === "" || (!rel.startsWith("..") && !isAbsolute(rel));
};

/** Quoted for a POSIX shell when it has anything but plain characters. */
export const shellWord = (s: string) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);

export interface ProgramEnv {
  execPath: string;
  cwd: string;
  /** Finds a command on PATH (Bun.which). */
  which(name: string): string | null;
  /** The checkout's root, or null for the compiled executable. */
  sourceRoot: string | null;
}

function currentEnv(): ProgramEnv {
  // From source the runtime is Bun itself (bun, or bun.exe from npm); the compiled executable has its own name.
  const fromSource = /^bun(\.exe)?$/i.test(basename(process.execPath)) && existsSync(join(SOURCE_ROOT, "bin", "offpeak"));
  return { execPath: process.execPath, cwd: process.cwd(), which: (n) => Bun.which(n), sourceRoot: fromSource ? SOURCE_ROOT : null };
}

/**
 * `npx offpeak` inside the checkout (npx finds the project's own bin from
 * any folder in it), the launcher's path outside it; for the executable,
 * its name when PATH finds this very file, else its path.
 */
export function programName(env: ProgramEnv = currentEnv()): string {
  if (env.sourceRoot) return inside(env.cwd, env.sourceRoot) ? "npx offpeak" : shellWord(join(env.sourceRoot, "bin", "offpeak"));
  const name = basename(env.execPath);
  if (env.which(name) === env.execPath) return name;
  const rel = relative(env.cwd, env.execPath);
  return shellWord(rel.startsWith("..") || isAbsolute(rel) ? env.execPath : `./${rel}`);
}

let cached: string | null = null;
/** programName() of this process (computed once). */
export const prog = () => (cached ??= programName());

/**
 * Help text with its command lines in the program's name: a line that
 * starts (after its indent, or `usage:`) with `offpeak ` is how to run
 * something, and gets what this process was run as.
 */
export function forProgram(text: string, name = prog()): string {
  if (name === "offpeak") return text;
  const shift = " ".repeat(Math.max(0, name.length - "offpeak".length));
  let inCommand = false;
  return text
    .split("\n")
    .map((line) => {
      const m = /^([ \t]+|[ \t]*usage:[ \t]*)offpeak(?= [a-z[-]|$)/.exec(line);
      if (m) {
        inCommand = true;
        return m[1] + name + line.slice(m[0].length);
      }
      // A command's continuation lines (deeply indented, under its arguments) move right with it.
      if (inCommand && /^ {10,}\S/.test(line)) return shift + line;
      inCommand = false;
      return line;
    })
    .join("\n");
}
