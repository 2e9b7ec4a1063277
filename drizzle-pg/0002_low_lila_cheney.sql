CREATE TABLE "key_usage" (
	"key_id" text NOT NULL,
	"node_id" text NOT NULL,
	"window_start" bigint NOT NULL,
	"requests" bigint NOT NULL,
	"tokens" bigint NOT NULL,
	"reserved_requests" bigint DEFAULT 0 NOT NULL,
	"reserved_tokens" bigint DEFAULT 0 NOT NULL,
	CONSTRAINT "key_usage_window_start_key_id_node_id_pk" PRIMARY KEY("window_start","key_id","node_id")
);
