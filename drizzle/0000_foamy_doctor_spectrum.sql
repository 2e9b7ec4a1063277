CREATE TABLE `api_keys` (
	`id` text PRIMARY KEY NOT NULL,
	`name` text NOT NULL,
	`project` text NOT NULL,
	`scopes` text NOT NULL,
	`hash` text NOT NULL,
	`prefix` text NOT NULL,
	`rpm` integer,
	`tpm` integer,
	`created_at` integer NOT NULL,
	`revoked_at` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `api_keys_hash_unique` ON `api_keys` (`hash`);--> statement-breakpoint
CREATE TABLE `files` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`project` text NOT NULL,
	`filename` text NOT NULL,
	`purpose` text NOT NULL,
	`bytes` integer NOT NULL,
	`status` text NOT NULL,
	`status_details` text,
	`created_at` integer NOT NULL,
	`expires_at` integer,
	`line_count` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `files_id_unique` ON `files` (`id`);--> statement-breakpoint
CREATE INDEX `files_project_seq` ON `files` (`project`,`seq`);--> statement-breakpoint
CREATE INDEX `files_expires_at` ON `files` (`expires_at`);