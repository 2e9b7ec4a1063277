// Exact confirmation of duplicate custom_id suspects found by fingerprint
// (see duplicateFinder.ts). Runs only when there are suspects: a real
// duplicate, or a 64-bit fingerprint collision (≈3e-6 for 10M ids). The
// work (./confirm.ts) runs in a Worker: see confirmInWorker.
import type { ConfirmedDuplicate } from "./confirm";
import type { Suspect } from "./duplicateFinder";
import { confirmInWorker } from "./validatorClient";

export async function firstConfirmedDuplicate(stream: ReadableStream<Uint8Array>, suspects: readonly Suspect[]): Promise<ConfirmedDuplicate | null> {
  if (suspects.length === 0) return null;
  return confirmInWorker(stream, suspects);
}
