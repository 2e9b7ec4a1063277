CREATE TABLE `idempotency_keys` (
	`project` text NOT NULL,
	`key` text NOT NULL,
	`request_hash` text NOT NULL,
	`state` text NOT NULL,
	`status` integer,
	`body` text,
	`created_at` integer NOT NULL,
	`expires_at` integer NOT NULL,
	PRIMARY KEY(`project`, `key`)
);
--> statement-breakpoint
CREATE INDEX `idempotency_keys_expires_at` ON `idempotency_keys` (`expires_at`);--> statement-breakpoint
CREATE TABLE `upstream_replicas` (
	`id` text PRIMARY KEY NOT NULL,
	`upstream` text NOT NULL,
	`base_url` text NOT NULL,
	`weight` real DEFAULT 1 NOT NULL,
	`state` text NOT NULL,
	`source` text NOT NULL,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `upstream_replicas_upstream` ON `upstream_replicas` (`upstream`);--> statement-breakpoint
ALTER TABLE `batches` ADD `api` text;