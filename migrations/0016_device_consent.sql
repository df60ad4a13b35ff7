-- Device consent: what the device's owner allows (JSON object of the five permissions), and when it
-- last changed. NULL means the device never set any (docs/original-agents.md says what that allows).
ALTER TABLE `devices` ADD `permissions` text;
--> statement-breakpoint
ALTER TABLE `devices` ADD `permissions_updated_at` text;
