-- The audit trail's hash chain: each row's hash covers its canonical form and the hash of the row
-- before it in the same chain (its site's, or the service-wide chain for rows without a site).
-- Both are written by the AuditStream Durable Object, which seals rows in id order shortly after
-- they are inserted; NULL until then.
ALTER TABLE `audit_logs` ADD `prev_hash` text;--> statement-breakpoint
ALTER TABLE `audit_logs` ADD `hash` text;--> statement-breakpoint
-- Walking one chain in id order (verification, the sealer finding a chain's head).
CREATE INDEX `audit_logs_site_id_idx` ON `audit_logs` (`site_id`,`id`);
