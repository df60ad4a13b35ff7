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
--> statement-breakpoint
CREATE TABLE `push_subscriptions` (
	`subscription_id` text PRIMARY KEY NOT NULL,
	`user_id` integer NOT NULL,
	`endpoint` text NOT NULL,
	`p256dh` text NOT NULL,
	`auth` text NOT NULL,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`last_sent_at` text
);
--> statement-breakpoint
CREATE UNIQUE INDEX `push_subscriptions_user_endpoint_uq` ON `push_subscriptions` (`user_id`,`endpoint`);--> statement-breakpoint
CREATE TABLE `push_notifier_cursor` (
	`name` text PRIMARY KEY NOT NULL,
	`last_id` integer NOT NULL
);
--> statement-breakpoint
ALTER TABLE `devices` ADD `push_token` text;--> statement-breakpoint
ALTER TABLE `devices` ADD `push_platform` text;
