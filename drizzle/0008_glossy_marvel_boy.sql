CREATE TABLE `key_usage` (
	`key_id` text NOT NULL,
	`node_id` text NOT NULL,
	`window_start` integer NOT NULL,
	`requests` integer NOT NULL,
	`tokens` integer NOT NULL,
	`reserved_requests` integer DEFAULT 0 NOT NULL,
	`reserved_tokens` integer DEFAULT 0 NOT NULL,
	PRIMARY KEY(`window_start`, `key_id`, `node_id`)
);
