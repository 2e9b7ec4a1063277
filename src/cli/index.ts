// The client commands of the offpeak executable: they talk to a running
// server over HTTP (plain fetch, no SDK), unlike `serve` and `keys`, which
// work on the data directory.
import { batchCommand } from "./run";
import { batchesCommand } from "./batches";
import { filesCommand } from "./files";
import { healthcheckCommand } from "./health";
import { upstreamsCommand } from "./upstreams";
import { webhooksCommand } from "./webhooks";

export const CLIENT_COMMANDS: Record<string, (argv: string[]) => Promise<number>> = {
  files: filesCommand,
  batches: batchesCommand,
  batch: batchCommand,
  healthcheck: healthcheckCommand,
  webhooks: webhooksCommand,
  upstreams: upstreamsCommand,
};

export { CliError } from "./args";
export { forProgram } from "./program";
