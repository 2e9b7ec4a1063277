// The `validating` phase for one shard: every line's url must be the batch's
// endpoint and its model one the server knows. (Syntax is checked
// at upload.) Line numbers are local to the shard; the runner adds offsets.
import { kindOfUrl } from "../../endpoints";
import { readLines } from "../../jsonl/lineReader";
import { openLocator } from "../../storage/locator";
import type { ValidateResult, ValidateTask } from "../types";
import { worked } from "./garbage";
import { holdsTurn, takeTurn } from "./turns";

const MAX_ERRORS = 100;

export async function validateShard(task: ValidateTask): Promise<ValidateResult> {
  const known = new Set(task.models);
  const result: ValidateResult = { lines: 0, requests: 0, errors: [], firstModel: null };
  // All of it is CPU work: it goes by turns (../turns.ts), given back by
  // entry.ts when the task ends. A shard running beside it on this Worker
  // may give the Worker's turn back while it waits on its upstream: taken
  // again before the next chunk.
  await takeTurn();
  const stream = openLocator(task.input).slice(task.start, task.end).stream();
  for await (const lines of readLines(stream)) {
    if (!holdsTurn()) await takeTurn();
    for (const { n, text } of lines) {
      result.lines = n;
      worked(text.length);
      if (text.trim() === "") continue;
      result.requests++;
      const req = JSON.parse(text) as { url: string; body: { model: string } };
      const model = req.body.model;
      result.firstModel ??= model;
      if (result.errors.length >= MAX_ERRORS) continue;
      if (kindOfUrl(req.url)?.endpoint !== task.endpoint)
        result.errors.push({ line: n, code: "invalid_url", param: "url", message: `Line ${n}: url '${req.url}' does not match the batch endpoint ${task.endpoint}` });
      else if (!known.has(model))
        result.errors.push({ line: n, code: "model_not_found", param: "body.model", message: `Line ${n}: model '${model}' is not available for ${task.endpoint}` });
    }
  }
  return result;
}
