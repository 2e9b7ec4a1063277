// Standard Webhooks signatures, as OpenAI sends them (and as the official
// SDKs' `client.webhooks.unwrap` checks them): HMAC-SHA256 over
// "{webhook-id}.{webhook-timestamp}.{body}", keyed with the base64-decoded
// part of the `whsec_…` secret, sent as `webhook-signature: v1,<base64>`.
import { createHmac, randomBytes } from "node:crypto";

/** `whsec_` + base64 of 32 random bytes. */
export const newSecret = (): string => `whsec_${randomBytes(32).toString("base64")}`;

export function signatureHeaders(secret: string, eventId: string, body: string, timestamp = Math.floor(Date.now() / 1000)): Record<string, string> {
  const key = Buffer.from(secret.slice("whsec_".length), "base64");
  const sig = createHmac("sha256", key).update(`${eventId}.${timestamp}.${body}`).digest("base64");
  return { "webhook-id": eventId, "webhook-timestamp": String(timestamp), "webhook-signature": `v1,${sig}` };
}
