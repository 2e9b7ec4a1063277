CREATE TABLE "upload_parts" (
	"id" text PRIMARY KEY NOT NULL,
	"upload_id" text NOT NULL,
	"key" text NOT NULL,
	"bytes" bigint NOT NULL,
	"created_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "uploads" (
	"id" text PRIMARY KEY NOT NULL,
	"project" text NOT NULL,
	"filename" text NOT NULL,
	"purpose" text NOT NULL,
	"mime_type" text NOT NULL,
	"bytes" bigint NOT NULL,
	"status" text NOT NULL,
	"created_at" bigint NOT NULL,
	"expires_at" bigint NOT NULL,
	"file_id" text NOT NULL,
	"file_expires_after" bigint
);
--> statement-breakpoint
ALTER TABLE "upload_parts" ADD CONSTRAINT "upload_parts_upload_id_uploads_id_fk" FOREIGN KEY ("upload_id") REFERENCES "public"."uploads"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "upload_parts_upload_id" ON "upload_parts" USING btree ("upload_id");--> statement-breakpoint
CREATE INDEX "uploads_project" ON "uploads" USING btree ("project");--> statement-breakpoint
CREATE INDEX "uploads_status_expires_at" ON "uploads" USING btree ("status","expires_at");