-- Device consent: what the device's owner allows (JSON object of the five permissions), and when it
-- last changed. NULL means the device never set any (docs/original-agents.md says what that allows).
ALTER TABLE `devices` ADD `permissions` text;
--> statement-breakpoint
ALTER TABLE `devices` ADD `permissions_updated_at` text;
--> statement-breakpoint
-- A device's own log lines go to the error log with the device in their context; this index finds
-- one device's lines, newest first, without reading everyone's.
CREATE INDEX `error_logs_device_idx` ON `error_logs` (json_extract(`context`, '$.device_id'), `created_at`);
--> statement-breakpoint
-- What a device changed in its own configuration, as its agent reports it, with the performance
-- before and after and any rollback.
CREATE TABLE `device_config_history` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`device_id` text NOT NULL,
	`site_id` text NOT NULL,
	`action` text NOT NULL,
	`parameter_name` text NOT NULL,
	`old_value` text,
	`new_value` text,
	`success` integer NOT NULL,
	`change_reason` text,
	`performance_before` text,
	`performance_after` text,
	`was_rolled_back` integer DEFAULT false NOT NULL,
	`rollback_reason` text,
	`rollback_success` integer,
	`rollback_performance` text,
	`rolled_back_at` text,
	`changed_at` text NOT NULL,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE INDEX `device_config_history_device_idx` ON `device_config_history` (`device_id`, `changed_at`);
