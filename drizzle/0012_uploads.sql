CREATE TABLE `upload_parts` (
	`id` text PRIMARY KEY NOT NULL,
	`upload_id` text NOT NULL,
	`key` text NOT NULL,
	`bytes` integer NOT NULL,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`upload_id`) REFERENCES `uploads`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `upload_parts_upload_id` ON `upload_parts` (`upload_id`);--> statement-breakpoint
CREATE TABLE `uploads` (
	`id` text PRIMARY KEY NOT NULL,
	`project` text NOT NULL,
	`filename` text NOT NULL,
	`purpose` text NOT NULL,
	`mime_type` text NOT NULL,
	`bytes` integer NOT NULL,
	`status` text NOT NULL,
	`created_at` integer NOT NULL,
	`expires_at` integer NOT NULL,
	`file_id` text NOT NULL,
	`file_expires_after` integer
);
--> statement-breakpoint
CREATE INDEX `uploads_project` ON `uploads` (`project`);--> statement-breakpoint
CREATE INDEX `uploads_status_expires_at` ON `uploads` (`status`,`expires_at`);