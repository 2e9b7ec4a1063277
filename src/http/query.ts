import { ApiError } from "../errors";

/** Parses an integer query parameter strictly: "abc", "1.5", "0" when min is 1 → 400 naming the param. */
export function intParam(raw: string | undefined, name: string, min: number, max: number, fallback: number): number {
  if (raw === undefined || raw === "") return fallback;
  if (!/^-?\d+$/.test(raw)) throw new ApiError("invalid_value", `${name} must be an integer between ${min} and ${max}`, { param: name });
  const n = Number(raw);
  if (n < min || n > max) throw new ApiError("invalid_value", `${name} must be between ${min} and ${max}, got ${n}`, { param: name });
  return n;
}

export function enumParam<T extends string>(raw: string | undefined, name: string, allowed: readonly T[], fallback: T): T {
  if (raw === undefined || raw === "") return fallback;
  if (!(allowed as readonly string[]).includes(raw)) throw new ApiError("invalid_value", `${name} must be one of ${allowed.join(", ")}`, { param: name });
  return raw as T;
}
