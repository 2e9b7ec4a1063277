CREATE TABLE "api_keys" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"project" text NOT NULL,
	"scopes" jsonb NOT NULL,
	"hash" text NOT NULL,
	"prefix" text NOT NULL,
	"rpm" bigint,
	"tpm" bigint,
	"created_at" bigint NOT NULL,
	"revoked_at" bigint,
	CONSTRAINT "api_keys_hash_unique" UNIQUE("hash")
);
--> statement-breakpoint
CREATE TABLE "files" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"project" text NOT NULL,
	"filename" text NOT NULL,
	"purpose" text NOT NULL,
	"bytes" bigint NOT NULL,
	"status" text NOT NULL,
	"status_details" text,
	"created_at" bigint NOT NULL,
	"expires_at" bigint,
	"line_count" bigint,
	"parts" bigint,
	CONSTRAINT "files_id_unique" UNIQUE("id")
);
--> statement-breakpoint
CREATE TABLE "file_parts" (
	"file_id" text NOT NULL,
	"idx" bigint NOT NULL,
	"key" text NOT NULL,
	"bytes" bigint NOT NULL,
	CONSTRAINT "file_parts_file_id_idx_pk" PRIMARY KEY("file_id","idx")
);
--> statement-breakpoint
CREATE TABLE "batches" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"project" text NOT NULL,
	"endpoint" text NOT NULL,
	"model" text,
	"input_file_id" text NOT NULL,
	"completion_window" text NOT NULL,
	"status" text NOT NULL,
	"stop_reason" text,
	"errors" jsonb,
	"output_file_id" text,
	"error_file_id" text,
	"created_at" bigint NOT NULL,
	"in_progress_at" bigint,
	"expires_at" bigint NOT NULL,
	"finalizing_at" bigint,
	"completed_at" bigint,
	"failed_at" bigint,
	"expired_at" bigint,
	"cancelling_at" bigint,
	"cancelled_at" bigint,
	"total" bigint DEFAULT 0 NOT NULL,
	"completed" bigint DEFAULT 0 NOT NULL,
	"failed" bigint DEFAULT 0 NOT NULL,
	"input_tokens" bigint DEFAULT 0 NOT NULL,
	"cached_tokens" bigint DEFAULT 0 NOT NULL,
	"output_tokens" bigint DEFAULT 0 NOT NULL,
	"reasoning_tokens" bigint DEFAULT 0 NOT NULL,
	"cost_amount" double precision DEFAULT 0 NOT NULL,
	"metadata" jsonb,
	"output_expires_after" bigint,
	"lease_owner" text,
	"lease_expires_at" bigint,
	CONSTRAINT "batches_id_unique" UNIQUE("id")
);
--> statement-breakpoint
CREATE TABLE "batch_shards" (
	"batch_id" text NOT NULL,
	"idx" bigint NOT NULL,
	"start_byte" bigint NOT NULL,
	"end_byte" bigint NOT NULL,
	"first_line" bigint,
	"requests" bigint,
	"status" text NOT NULL,
	"lease_owner" text,
	"lease_expires_at" bigint,
	"completed" bigint DEFAULT 0 NOT NULL,
	"failed" bigint DEFAULT 0 NOT NULL,
	"input_tokens" bigint DEFAULT 0 NOT NULL,
	"cached_tokens" bigint DEFAULT 0 NOT NULL,
	"output_tokens" bigint DEFAULT 0 NOT NULL,
	"reasoning_tokens" bigint DEFAULT 0 NOT NULL,
	"cost_amount" double precision DEFAULT 0 NOT NULL,
	CONSTRAINT "batch_shards_batch_id_idx_pk" PRIMARY KEY("batch_id","idx")
);
--> statement-breakpoint
CREATE TABLE "chat_messages" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"chat_id" text NOT NULL,
	"role" text NOT NULL,
	"content" text NOT NULL,
	"created_at" bigint NOT NULL,
	CONSTRAINT "chat_messages_id_unique" UNIQUE("id")
);
--> statement-breakpoint
CREATE TABLE "chats" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"project" text NOT NULL,
	"model" text NOT NULL,
	"system" text,
	"metadata" jsonb,
	"created_at" bigint NOT NULL,
	CONSTRAINT "chats_id_unique" UNIQUE("id")
);
--> statement-breakpoint
CREATE TABLE "webhook_attempts" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"event_id" text NOT NULL,
	"endpoint_id" text NOT NULL,
	"type" text NOT NULL,
	"attempt" bigint NOT NULL,
	"status_code" bigint,
	"error" text,
	"created_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "webhook_endpoints" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"project" text NOT NULL,
	"url" text NOT NULL,
	"events" jsonb NOT NULL,
	"secret" text NOT NULL,
	"created_at" bigint NOT NULL,
	CONSTRAINT "webhook_endpoints_id_unique" UNIQUE("id")
);
--> statement-breakpoint
CREATE TABLE "webhook_events" (
	"seq" bigserial PRIMARY KEY NOT NULL,
	"id" text NOT NULL,
	"endpoint_id" text NOT NULL,
	"type" text NOT NULL,
	"payload" text NOT NULL,
	"status" text NOT NULL,
	"attempts" bigint DEFAULT 0 NOT NULL,
	"next_attempt_at" bigint NOT NULL,
	"created_at" bigint NOT NULL,
	CONSTRAINT "webhook_events_id_unique" UNIQUE("id")
);
--> statement-breakpoint
CREATE TABLE "nodes" (
	"id" text PRIMARY KEY NOT NULL,
	"started_at" bigint NOT NULL,
	"last_seen" bigint NOT NULL,
	"shards" bigint DEFAULT 0 NOT NULL,
	"stopped_at" bigint
);
--> statement-breakpoint
ALTER TABLE "file_parts" ADD CONSTRAINT "file_parts_file_id_files_id_fk" FOREIGN KEY ("file_id") REFERENCES "public"."files"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chat_messages" ADD CONSTRAINT "chat_messages_chat_id_chats_id_fk" FOREIGN KEY ("chat_id") REFERENCES "public"."chats"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "files_project_seq" ON "files" USING btree ("project","seq");--> statement-breakpoint
CREATE INDEX "files_expires_at" ON "files" USING btree ("expires_at");--> statement-breakpoint
CREATE INDEX "batches_project_seq" ON "batches" USING btree ("project","seq");--> statement-breakpoint
CREATE INDEX "batches_status" ON "batches" USING btree ("status");--> statement-breakpoint
CREATE INDEX "batch_shards_status" ON "batch_shards" USING btree ("status");--> statement-breakpoint
CREATE INDEX "chat_messages_chat_seq" ON "chat_messages" USING btree ("chat_id","seq");--> statement-breakpoint
CREATE INDEX "chats_project_seq" ON "chats" USING btree ("project","seq");--> statement-breakpoint
CREATE INDEX "webhook_attempts_endpoint" ON "webhook_attempts" USING btree ("endpoint_id","seq");--> statement-breakpoint
CREATE INDEX "webhook_endpoints_project" ON "webhook_endpoints" USING btree ("project","seq");--> statement-breakpoint
CREATE INDEX "webhook_events_due" ON "webhook_events" USING btree ("status","next_attempt_at");--> statement-breakpoint
CREATE INDEX "webhook_events_endpoint_due" ON "webhook_events" USING btree ("endpoint_id","status","next_attempt_at");