// The tables, one schema per dialect (sqlite/ and pg/: the same tables, the
// same columns, the same TypeScript shapes). Code outside src/db takes the
// set its database uses from `db.t` and is typed against the Postgres set:
// Postgres's query builder is async-only, so the types allow only what both
// dialects run (await a query; no SQLite-only .all()/.get()/.run()).
import * as pg from "./pg";
import * as sqlite from "./sqlite";

export type Tables = typeof pg;
export const pgTables: Tables = pg;
// The SQLite tables build the same queries with the same row shapes; only
// their TypeScript classes differ.
export const sqliteTables = sqlite as unknown as Tables;

export type FileRow = typeof pg.files.$inferSelect;
export type FilePartRow = typeof pg.fileParts.$inferSelect;
export type BatchRow = typeof pg.batches.$inferSelect;
export type ShardRow = typeof pg.batchShards.$inferSelect;
export type KeyRow = typeof pg.apiKeys.$inferSelect;
export type ChatRow = typeof pg.chats.$inferSelect;
export type ChatMessageRow = typeof pg.chatMessages.$inferSelect;
export type WebhookEndpointRow = typeof pg.webhookEndpoints.$inferSelect;
export type WebhookEventRow = typeof pg.webhookEvents.$inferSelect;
export type NodeRow = typeof pg.nodes.$inferSelect;
export type IdempotencyKeyRow = typeof pg.idempotencyKeys.$inferSelect;
export type ReplicaRow = typeof pg.upstreamReplicas.$inferSelect;
export type UploadRow = typeof pg.uploads.$inferSelect;
export type UploadPartRow = typeof pg.uploadParts.$inferSelect;
