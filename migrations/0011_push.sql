CREATE TABLE `push_deliveries` (
	`push_id` text PRIMARY KEY NOT NULL,
	`kind` text NOT NULL,
	`created_by_user_id` integer NOT NULL,
	`created_by` text NOT NULL,
	`site_ids` text NOT NULL,
	`notifications` text NOT NULL,
	`targets` text NOT NULL,
	`idempotency_key` text,
	`request_fingerprint` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `push_deliveries_idem_uq` ON `push_deliveries` (`created_by_user_id`,`idempotency_key`);--> statement-breakpoint
CREATE INDEX `push_deliveries_created_idx` ON `push_deliveries` (`created_at`);
