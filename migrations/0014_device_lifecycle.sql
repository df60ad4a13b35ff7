CREATE TABLE `device_lifecycle_requests` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`user_id` integer NOT NULL,
	`idempotency_key` text NOT NULL,
	`device_id` text NOT NULL,
	`site_id` text NOT NULL,
	`action` text NOT NULL,
	`request_fingerprint` text NOT NULL,
	`status_code` integer NOT NULL,
	`response` text NOT NULL,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `device_lifecycle_requests_idem_uq` ON `device_lifecycle_requests` (`user_id`,`idempotency_key`);--> statement-breakpoint
CREATE INDEX `device_lifecycle_requests_device_idx` ON `device_lifecycle_requests` (`device_id`);--> statement-breakpoint
CREATE INDEX `job_executions_device_idx` ON `job_executions` (`device_id`,`created_at`);
