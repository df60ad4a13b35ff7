ALTER TABLE `device_state_history` ADD `source` text DEFAULT 'presence' NOT NULL;--> statement-breakpoint
ALTER TABLE `device_state_history` ADD `user_id` integer;--> statement-breakpoint
CREATE INDEX `device_state_history_created_idx` ON `device_state_history` (`created_at`);--> statement-breakpoint
CREATE INDEX `user_activities_created_idx` ON `user_activities` (`created_at`);--> statement-breakpoint
ALTER TABLE `job_outcomes` ADD `site_id` text;--> statement-breakpoint
ALTER TABLE `job_outcomes` ADD `scope` text DEFAULT 'job' NOT NULL;--> statement-breakpoint
ALTER TABLE `error_logs` ADD `fingerprint` text;--> statement-breakpoint
ALTER TABLE `error_logs` ADD `occurrences` integer DEFAULT 1 NOT NULL;--> statement-breakpoint
ALTER TABLE `error_logs` ADD `last_seen_at` text;--> statement-breakpoint
ALTER TABLE `error_logs` ADD `session_id` text;--> statement-breakpoint
ALTER TABLE `error_logs` ADD `ip_address` text;--> statement-breakpoint
ALTER TABLE `error_logs` ADD `resolved_at` text;--> statement-breakpoint
ALTER TABLE `error_logs` ADD `resolved_by` integer;--> statement-breakpoint
CREATE INDEX `error_logs_fingerprint_idx` ON `error_logs` (`fingerprint`,`created_at`);--> statement-breakpoint
CREATE INDEX `error_logs_status_created_idx` ON `error_logs` (`resolution_status`,`created_at`);--> statement-breakpoint
CREATE TABLE `error_report_windows` (
	`client_key` text NOT NULL,
	`window_start` text NOT NULL,
	`reports` integer DEFAULT 0 NOT NULL,
	PRIMARY KEY(`window_start`, `client_key`)
);
--> statement-breakpoint
CREATE TABLE `request_rollups` (
	`period` text NOT NULL,
	`bucket_start` text NOT NULL,
	`route` text NOT NULL,
	`method` text NOT NULL,
	`status_class` integer NOT NULL,
	`count` integer NOT NULL,
	`sum_ms` real NOT NULL,
	`min_ms` real NOT NULL,
	`max_ms` real NOT NULL,
	`histogram` text NOT NULL,
	`flushes` integer DEFAULT 1 NOT NULL,
	PRIMARY KEY(`period`, `bucket_start`, `route`, `method`, `status_class`)
);
--> statement-breakpoint
CREATE TABLE `job_outcome_rollups` (
	`period` text NOT NULL,
	`bucket_start` text NOT NULL,
	`site_id` text NOT NULL,
	`job_type` text NOT NULL,
	`scope` text NOT NULL,
	`status` text NOT NULL,
	`count` integer NOT NULL,
	`timed_count` integer NOT NULL,
	`sum_duration_ms` real NOT NULL,
	`min_duration_ms` real,
	`max_duration_ms` real,
	`histogram` text NOT NULL,
	PRIMARY KEY(`period`, `bucket_start`, `site_id`, `job_type`, `scope`, `status`)
);
--> statement-breakpoint
CREATE TABLE `error_rollups` (
	`bucket_start` text NOT NULL,
	`category` text NOT NULL,
	`severity` text NOT NULL,
	`count` integer NOT NULL,
	PRIMARY KEY(`bucket_start`, `category`, `severity`)
);
--> statement-breakpoint
UPDATE `job_outcomes` SET `site_id` = json_extract(`metadata`, '$.site_id') WHERE `site_id` IS NULL AND json_valid(`metadata`);--> statement-breakpoint
INSERT INTO `error_rollups` (`bucket_start`, `category`, `severity`, `count`)
SELECT strftime('%Y-%m-%dT%H:00:00.000Z', `created_at`), `category`, `severity`, count(*) FROM `error_logs` GROUP BY 1, 2, 3;
