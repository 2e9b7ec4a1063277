CREATE TABLE `webhook_attempts` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`event_id` text NOT NULL,
	`endpoint_id` text NOT NULL,
	`type` text NOT NULL,
	`attempt` integer NOT NULL,
	`status_code` integer,
	`error` text,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `webhook_attempts_endpoint` ON `webhook_attempts` (`endpoint_id`,`seq`);--> statement-breakpoint
CREATE TABLE `webhook_endpoints` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`project` text NOT NULL,
	`url` text NOT NULL,
	`events` text NOT NULL,
	`secret` text NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `webhook_endpoints_id_unique` ON `webhook_endpoints` (`id`);--> statement-breakpoint
CREATE INDEX `webhook_endpoints_project` ON `webhook_endpoints` (`project`,`seq`);--> statement-breakpoint
CREATE TABLE `webhook_events` (
	`seq` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`id` text NOT NULL,
	`endpoint_id` text NOT NULL,
	`type` text NOT NULL,
	`payload` text NOT NULL,
	`status` text NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`next_attempt_at` integer NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `webhook_events_id_unique` ON `webhook_events` (`id`);--> statement-breakpoint
CREATE INDEX `webhook_events_due` ON `webhook_events` (`status`,`next_attempt_at`);--> statement-breakpoint
CREATE INDEX `webhook_events_endpoint` ON `webhook_events` (`endpoint_id`);