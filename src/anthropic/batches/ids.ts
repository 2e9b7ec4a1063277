// A message batch's id is its batch's id with another prefix (docs/CONTRACT.md §22):
// `batch_X` is shown as `msgbatch_X`, and `msgbatch_X` looked up as
// `batch_X`. One row, two names; nothing to store or keep in step.
import { isId } from "../../ids";

const SHOWN = "msgbatch_";
const STORED = "batch_";

/** The id a message batch is shown under. */
export const messageBatchId = (batchId: string): string => SHOWN + batchId.slice(STORED.length);

/** The batch row's id for a message batch id; null for anything that is not one (an OpenAI `batch_…` id too). */
export function batchIdOf(id: string): string | null {
  return isId(SHOWN, id) ? STORED + id.slice(SHOWN.length) : null;
}
