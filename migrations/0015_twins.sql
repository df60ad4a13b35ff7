CREATE TABLE `device_twins` (
	`device_id` text PRIMARY KEY NOT NULL,
	`site_id` text NOT NULL,
	`desired` text DEFAULT '{}' NOT NULL,
	`version` integer DEFAULT 0 NOT NULL,
	`in_sync` integer DEFAULT 1 NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE INDEX `device_twins_site_sync_idx` ON `device_twins` (`site_id`,`in_sync`);
--> statement-breakpoint
CREATE TABLE `twin_templates` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`scope` text NOT NULL,
	`scope_id` text NOT NULL,
	`segment` text DEFAULT '' NOT NULL,
	`document` text NOT NULL,
	`version` integer DEFAULT 1 NOT NULL,
	`updated_by` integer,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `twin_templates_scope_uq` ON `twin_templates` (`scope`,`scope_id`,`segment`);
