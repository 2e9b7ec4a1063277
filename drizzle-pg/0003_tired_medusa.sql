ALTER TABLE "batches" ADD COLUMN "estimated_completion_at" bigint;--> statement-breakpoint
ALTER TABLE "batches" ADD COLUMN "status_details_code" text;--> statement-breakpoint
ALTER TABLE "batches" ADD COLUMN "status_details_message" text;--> statement-breakpoint
ALTER TABLE "batches" ADD COLUMN "status_details_since" bigint;