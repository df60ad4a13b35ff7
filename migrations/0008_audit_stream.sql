-- The audit trail's hash chain: each row's hash covers its canonical form and the hash of the row
-- before it in the same chain (its site's, or the service-wide chain for rows without a site).
-- Both are written by the AuditStream Durable Object, which seals rows in id order shortly after
-- they are inserted; NULL until then.
ALTER TABLE `audit_logs` ADD `prev_hash` text;--> statement-breakpoint
ALTER TABLE `audit_logs` ADD `hash` text;--> statement-breakpoint
-- Walking one chain in id order (verification, the sealer finding a chain's head).
CREATE INDEX `audit_logs_site_id_idx` ON `audit_logs` (`site_id`,`id`);
--> statement-breakpoint
-- Alert rules over the audit trail, evaluated by the AuditStream object as it publishes events.
-- event_types and severities are JSON arrays; webhook_secret is sealed with AES-256-GCM.
CREATE TABLE `audit_alert_rules` (
	`id` text PRIMARY KEY NOT NULL,
	`alert_name` text NOT NULL,
	`event_types` text NOT NULL,
	`threshold` integer NOT NULL,
	`time_window_s` integer NOT NULL,
	`site_id` text,
	`severities` text,
	`cooldown_s` integer NOT NULL,
	`enabled` integer DEFAULT true NOT NULL,
	`webhook_url` text,
	`webhook_secret` text,
	`email` text,
	`created_by` integer,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
-- Every delivery try of every alert notification (webhook or e-mail), with its outcome.
CREATE TABLE `audit_alert_deliveries` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`rule_id` text NOT NULL,
	`firing_id` text NOT NULL,
	`channel` text NOT NULL,
	`attempt` integer NOT NULL,
	`outcome` text NOT NULL,
	`http_status` integer,
	`error` text,
	`next_attempt_at` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE INDEX `audit_alert_deliveries_rule_idx` ON `audit_alert_deliveries` (`rule_id`,`id`);
--> statement-breakpoint
-- Where audit events are forwarded (syslog over TCP/TLS, or a signed webhook); severities and
-- categories are JSON arrays (NULL: all). Their delivery tries share audit_alert_deliveries
-- (rule_id is then the integration's id).
CREATE TABLE `audit_integrations` (
	`id` text PRIMARY KEY NOT NULL,
	`type` text NOT NULL,
	`destination` text NOT NULL,
	`format` text NOT NULL,
	`severities` text,
	`categories` text,
	`webhook_secret` text,
	`created_by` integer,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
