CREATE TABLE `command_index` (
	`command_id` text PRIMARY KEY NOT NULL,
	`site_id` text NOT NULL,
	`device_id` text NOT NULL,
	`expires_at` text NOT NULL,
	`closed_at` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE INDEX `command_index_open_expiry_idx` ON `command_index` (`closed_at`,`expires_at`);