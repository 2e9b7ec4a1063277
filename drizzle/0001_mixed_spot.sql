CREATE TABLE `batches` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`project` text NOT NULL,
	`endpoint` text NOT NULL,
	`model` text,
	`input_file_id` text NOT NULL,
	`completion_window` text NOT NULL,
	`status` text NOT NULL,
	`stop_reason` text,
	`errors` text,
	`output_file_id` text,
	`error_file_id` text,
	`created_at` integer NOT NULL,
	`in_progress_at` integer,
	`expires_at` integer NOT NULL,
	`finalizing_at` integer,
	`completed_at` integer,
	`failed_at` integer,
	`expired_at` integer,
	`cancelling_at` integer,
	`cancelled_at` integer,
	`total` integer DEFAULT 0 NOT NULL,
	`completed` integer DEFAULT 0 NOT NULL,
	`failed` integer DEFAULT 0 NOT NULL,
	`input_tokens` integer DEFAULT 0 NOT NULL,
	`cached_tokens` integer DEFAULT 0 NOT NULL,
	`output_tokens` integer DEFAULT 0 NOT NULL,
	`reasoning_tokens` integer DEFAULT 0 NOT NULL,
	`cost_amount` real DEFAULT 0 NOT NULL,
	`metadata` text,
	`output_expires_after` integer,
	`lease_owner` text,
	`lease_expires_at` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `batches_id_unique` ON `batches` (`id`);--> statement-breakpoint
CREATE INDEX `batches_project_seq` ON `batches` (`project`,`seq`);--> statement-breakpoint
CREATE INDEX `batches_status` ON `batches` (`status`);--> statement-breakpoint
CREATE TABLE `batch_shards` (
	`batch_id` text NOT NULL,
	`idx` integer NOT NULL,
	`start_byte` integer NOT NULL,
	`end_byte` integer NOT NULL,
	`first_line` integer,
	`requests` integer,
	`status` text NOT NULL,
	`lease_owner` text,
	`lease_expires_at` integer,
	`completed` integer DEFAULT 0 NOT NULL,
	`failed` integer DEFAULT 0 NOT NULL,
	`input_tokens` integer DEFAULT 0 NOT NULL,
	`cached_tokens` integer DEFAULT 0 NOT NULL,
	`output_tokens` integer DEFAULT 0 NOT NULL,
	`reasoning_tokens` integer DEFAULT 0 NOT NULL,
	`cost_amount` real DEFAULT 0 NOT NULL,
	PRIMARY KEY(`batch_id`, `idx`)
);
--> statement-breakpoint
CREATE INDEX `batch_shards_status` ON `batch_shards` (`status`);