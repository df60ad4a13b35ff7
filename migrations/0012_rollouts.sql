ALTER TABLE `sites` ADD `time_zone` text DEFAULT 'UTC' NOT NULL;
--> statement-breakpoint
ALTER TABLE `jobs` ADD `rollout_id` text;
--> statement-breakpoint
ALTER TABLE `jobs` ADD `payload` text;
--> statement-breakpoint
CREATE INDEX `jobs_rollout_idx` ON `jobs` (`rollout_id`);
--> statement-breakpoint
CREATE TABLE `rollouts` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`rollout_id` text NOT NULL,
	`name` text NOT NULL,
	`tenant_id` text,
	`site_ids` text NOT NULL,
	`action` text NOT NULL,
	`spec` text NOT NULL,
	`plan` text NOT NULL,
	`status` text DEFAULT 'scheduled' NOT NULL,
	`current_wave` integer DEFAULT 0 NOT NULL,
	`total_devices` integer DEFAULT 0 NOT NULL,
	`abort_reason` text,
	`created_by` integer NOT NULL,
	`created_by_email` text,
	`idempotency_key` text,
	`request_fingerprint` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`finished_at` text
);
--> statement-breakpoint
CREATE UNIQUE INDEX `rollouts_rollout_id_uq` ON `rollouts` (`rollout_id`);
--> statement-breakpoint
CREATE UNIQUE INDEX `rollouts_idem_uq` ON `rollouts` (`created_by`,`idempotency_key`);
--> statement-breakpoint
CREATE INDEX `rollouts_status_updated_idx` ON `rollouts` (`status`,`updated_at`);
--> statement-breakpoint
CREATE INDEX `rollouts_created_idx` ON `rollouts` (`created_at`);
--> statement-breakpoint
CREATE TABLE `rollout_sites` (
	`rollout_id` text NOT NULL,
	`site_id` text NOT NULL,
	PRIMARY KEY(`rollout_id`, `site_id`)
);
--> statement-breakpoint
CREATE INDEX `rollout_sites_site_idx` ON `rollout_sites` (`site_id`);
