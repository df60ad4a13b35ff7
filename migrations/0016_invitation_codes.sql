-- Invitations are accepted with a one-time code (its SHA-256 here), not by whoever signs up with the address first.
ALTER TABLE `invitations` ADD `code_digest` text;--> statement-breakpoint
CREATE UNIQUE INDEX `invitations_code_digest_uq` ON `invitations` (`code_digest`);