-- webhook_events.created_at was written in ms; every other created_at (and the event body's) is in Unix seconds.
UPDATE "webhook_events" SET "created_at" = "created_at" / 1000 WHERE "created_at" > 100000000000;
