ALTER TABLE `users` ADD `oidc_issuer` text;--> statement-breakpoint
DROP INDEX IF EXISTS `users_oidc_subject_uq`;--> statement-breakpoint
CREATE UNIQUE INDEX `users_oidc_identity_uq` ON `users` (`oidc_issuer`,`oidc_subject`);
