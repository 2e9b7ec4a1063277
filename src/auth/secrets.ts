import { timingSafeEqual } from "node:crypto";
import { base62 } from "../ids";

export const KEY_PREFIX = "sk-op-";
export const newSecret = () => KEY_PREFIX + base62(40);

export const hashSecret = (secret: string) => Bun.SHA256.hash(secret, "hex") as string;

/** Constant-time equality of two hex digests of equal length. */
export function sameHash(a: string, b: string): boolean {
  const x = Buffer.from(a, "hex");
  const y = Buffer.from(b, "hex");
  return x.length === y.length && timingSafeEqual(x, y);
}
