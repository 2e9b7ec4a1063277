CREATE TABLE "idempotency_keys" (
	"project" text NOT NULL,
	"key" text NOT NULL,
	"request_hash" text NOT NULL,
	"state" text NOT NULL,
	"status" bigint,
	"body" text,
	"created_at" bigint NOT NULL,
	"expires_at" bigint NOT NULL,
	CONSTRAINT "idempotency_keys_project_key_pk" PRIMARY KEY("project","key")
);
--> statement-breakpoint
CREATE TABLE "upstream_replicas" (
	"id" text PRIMARY KEY NOT NULL,
	"upstream" text NOT NULL,
	"base_url" text NOT NULL,
	"weight" double precision DEFAULT 1 NOT NULL,
	"state" text NOT NULL,
	"source" text NOT NULL,
	"updated_at" bigint NOT NULL
);
--> statement-breakpoint
ALTER TABLE "batches" ADD COLUMN "api" text;--> statement-breakpoint
CREATE INDEX "idempotency_keys_expires_at" ON "idempotency_keys" USING btree ("expires_at");--> statement-breakpoint
CREATE INDEX "upstream_replicas_upstream" ON "upstream_replicas" USING btree ("upstream");