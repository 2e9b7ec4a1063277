// The executable's entry point (`bun src/main.ts`) run as a child process,
// as a user runs `offpeak …`: its stdout, stderr and exit code. Its stderr is
// a pipe, so progress comes in its plain (non-terminal) form.
import { join } from "node:path";
import { cleanEnv } from "./env";

export const MAIN = join(import.meta.dir, "..", "..", "src", "main.ts");

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `offpeak ARGS` with `env` (on top of cleanEnv()) in `cwd`. */
export async function runCli(args: string[], env: Record<string, string> = {}, cwd?: string): Promise<CliRun> {
  const proc = Bun.spawn([process.execPath, MAIN, ...args], { cwd, env: cleanEnv(env), stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}
