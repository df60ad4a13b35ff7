CREATE TABLE `agents` (
	`device_id` text PRIMARY KEY NOT NULL,
	`site_id` text NOT NULL,
	`source` text NOT NULL,
	`state` text DEFAULT 'idle' NOT NULL,
	`config_version` text,
	`target_version` text,
	`health_status` text,
	`last_health_check` text,
	`last_health_at` text,
	`booted_at` text,
	`state_changed_at` text NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE INDEX `agents_site_state_idx` ON `agents` (`site_id`,`state`);