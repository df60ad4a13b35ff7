CREATE TABLE `ai_preferences` (
	`user_id` integer PRIMARY KEY NOT NULL,
	`mode` text NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE TABLE `ai_exchanges` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`user_id` integer NOT NULL,
	`query` text NOT NULL,
	`response` text NOT NULL,
	`intent` text NOT NULL,
	`device_ids` text NOT NULL,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`expires_at` text NOT NULL
);
--> statement-breakpoint
CREATE INDEX `ai_exchanges_user_created` ON `ai_exchanges` (`user_id`,`created_at`);--> statement-breakpoint
CREATE INDEX `ai_exchanges_expires` ON `ai_exchanges` (`expires_at`);
