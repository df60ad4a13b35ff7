CREATE TABLE `audit_retention_policy` (
	`id` integer PRIMARY KEY NOT NULL CHECK (`id` = 1),
	`retention_days` integer NOT NULL,
	`archive_after_days` integer,
	`compress_archives` integer NOT NULL,
	`encryption_required` integer NOT NULL,
	`updated_by` integer,
	`updated_at` text NOT NULL
);--> statement-breakpoint
CREATE TABLE `audit_archives` (
	`archive_id` text PRIMARY KEY NOT NULL,
	`day` text NOT NULL,
	`first_event_id` integer NOT NULL,
	`last_event_id` integer NOT NULL,
	`events` integer NOT NULL,
	`bytes` integer NOT NULL,
	`compressed` integer NOT NULL,
	`encrypted` integer NOT NULL,
	`created_at` text NOT NULL
);--> statement-breakpoint
CREATE INDEX `audit_archives_day_idx` ON `audit_archives` (`day`);--> statement-breakpoint
CREATE TABLE `audit_retention_runs` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`trigger` text NOT NULL,
	`started_at` text NOT NULL,
	`finished_at` text NOT NULL,
	`archived_events` integer NOT NULL,
	`archive_objects` integer NOT NULL,
	`deleted_events` integer NOT NULL,
	`error` text
);--> statement-breakpoint
CREATE INDEX `audit_retention_runs_started_idx` ON `audit_retention_runs` (`started_at`);--> statement-breakpoint
ALTER TABLE `audit_logs` ADD `archived_at` text;--> statement-breakpoint
CREATE INDEX `audit_logs_unarchived_created_idx` ON `audit_logs` (`created_at`) WHERE `archived_at` IS NULL;
