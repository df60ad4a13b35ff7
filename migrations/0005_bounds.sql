-- Identities that differ only in letter case name the same thing to a person: e-mails, usernames,
-- site ids and device ids are unique regardless of (ASCII) case from here on.
--
-- Rows already in the database may break that rule. They are kept as they are: the oldest row of
-- each such group stays the owner of the name, and every later row gets its own id in
-- `case_fold_exempt`, which the case-insensitive unique indexes include, so they do not collide.
-- Every row created from now on has `case_fold_exempt` = 0 and so collides with any row of the
-- same name in another case. (docs/security.md, "Input rules")
ALTER TABLE `users` ADD `case_fold_exempt` integer DEFAULT 0 NOT NULL;
--> statement-breakpoint
ALTER TABLE `sites` ADD `case_fold_exempt` integer DEFAULT 0 NOT NULL;
--> statement-breakpoint
ALTER TABLE `devices` ADD `case_fold_exempt` integer DEFAULT 0 NOT NULL;
--> statement-breakpoint
UPDATE `users` SET `case_fold_exempt` = `id`
WHERE `id` NOT IN (SELECT min(`id`) FROM `users` GROUP BY lower(`email`))
	OR `id` NOT IN (SELECT min(`id`) FROM `users` GROUP BY lower(`username`));
--> statement-breakpoint
UPDATE `sites` SET `case_fold_exempt` = `id` WHERE `id` NOT IN (SELECT min(`id`) FROM `sites` GROUP BY lower(`site_id`));
--> statement-breakpoint
UPDATE `devices` SET `case_fold_exempt` = `id` WHERE `id` NOT IN (SELECT min(`id`) FROM `devices` GROUP BY lower(`device_id`));
--> statement-breakpoint
CREATE UNIQUE INDEX `users_email_ci_uq` ON `users` (lower(`email`),`case_fold_exempt`);
--> statement-breakpoint
CREATE UNIQUE INDEX `users_username_ci_uq` ON `users` (lower(`username`),`case_fold_exempt`);
--> statement-breakpoint
CREATE UNIQUE INDEX `sites_site_id_ci_uq` ON `sites` (lower(`site_id`),`case_fold_exempt`);
--> statement-breakpoint
CREATE UNIQUE INDEX `devices_device_id_ci_uq` ON `devices` (lower(`device_id`),`case_fold_exempt`);
--> statement-breakpoint
-- Job creation with an Idempotency-Key: the key, per site, and a digest of the request it came with.
ALTER TABLE `jobs` ADD `idempotency_key` text;
--> statement-breakpoint
ALTER TABLE `jobs` ADD `request_fingerprint` text;
--> statement-breakpoint
CREATE UNIQUE INDEX `jobs_idem_uq` ON `jobs` (`site_id`,`idempotency_key`);
