CREATE TABLE `invitations` (
	`invitation_id` text PRIMARY KEY NOT NULL,
	`scope` text NOT NULL,
	`target_id` text NOT NULL,
	`email` text NOT NULL,
	`role` text NOT NULL,
	`invited_by` integer,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`expires_at` text NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `invitations_target_email_uq` ON `invitations` (`scope`,`target_id`,`email`);--> statement-breakpoint
CREATE INDEX `invitations_email_idx` ON `invitations` (`email`);
