// The executable's entry point (`bun src/main.ts`) run as a child process,
// as a user runs `offpeak …`: its stdout, stderr and exit code. Its stderr is
// a pipe, so progress comes in its plain (non-terminal) form.
import { join } from "node:path";

export const MAIN = join(import.meta.dir, "..", "..", "src", "main.ts");

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** The environment without any offpeak settings inherited from the caller, plus `extra`. */
export function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v === undefined || k.startsWith("OFFPEAK_") || k === "PORT" || k === "HOST") continue;
    env[k] = v;
  }
  return { ...env, ...extra };
}

/** Runs `offpeak ARGS` with `env` (on top of cleanEnv()) in `cwd`. */
export async function runCli(args: string[], env: Record<string, string> = {}, cwd?: string): Promise<CliRun> {
  const proc = Bun.spawn([process.execPath, MAIN, ...args], { cwd, env: cleanEnv(env), stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}
