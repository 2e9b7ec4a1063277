CREATE TABLE `file_parts` (
	`file_id` text NOT NULL,
	`idx` integer NOT NULL,
	`key` text NOT NULL,
	`bytes` integer NOT NULL,
	PRIMARY KEY(`file_id`, `idx`),
	FOREIGN KEY (`file_id`) REFERENCES `files`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
ALTER TABLE `files` ADD `parts` integer;