ALTER TABLE `batches` ADD `estimated_completion_at` integer;--> statement-breakpoint
ALTER TABLE `batches` ADD `status_details_code` text;--> statement-breakpoint
ALTER TABLE `batches` ADD `status_details_message` text;--> statement-breakpoint
ALTER TABLE `batches` ADD `status_details_since` integer;