DROP INDEX `webhook_events_endpoint`;--> statement-breakpoint
CREATE INDEX `webhook_events_endpoint_due` ON `webhook_events` (`endpoint_id`,`status`,`next_attempt_at`);