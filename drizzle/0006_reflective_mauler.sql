CREATE TABLE `nodes` (
	`id` text PRIMARY KEY NOT NULL,
	`started_at` integer NOT NULL,
	`last_seen` integer NOT NULL,
	`shards` integer DEFAULT 0 NOT NULL,
	`stopped_at` integer
);
