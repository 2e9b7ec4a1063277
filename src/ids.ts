// Ids are a prefix plus base62 characters from the CSPRNG. Rejection sampling
// keeps every character equally likely (256 is not a multiple of 62).
const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

export function base62(length: number): string {
  let out = "";
  const buf = new Uint8Array(length * 2);
  while (out.length < length) {
    crypto.getRandomValues(buf);
    for (let i = 0; i < buf.length && out.length < length; i++) {
      const b = buf[i]! & 0x3f; // 0..63: two of 64 values rejected
      if (b < 62) out += ALPHABET[b];
    }
  }
  return out;
}

export const newId = (prefix: "file-" | "batch_" | "batch_req_" | "chat_" | "msg_" | "key_" | "chatcmpl-") => prefix + base62(24);

const BASE62 = /^[0-9A-Za-z]{24}$/;

/** Path ids are checked with this before they reach storage or the database. */
export function isId(prefix: string, value: string): boolean {
  return value.length === prefix.length + 24 && value.startsWith(prefix) && BASE62.test(value.slice(prefix.length));
}

export const nowSeconds = () => Math.floor(Date.now() / 1000);
