CREATE TABLE `api_request_logs` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`request_id` text,
	`endpoint` text NOT NULL,
	`method` text NOT NULL,
	`status_code` integer NOT NULL,
	`response_time_ms` real NOT NULL,
	`user_id` integer,
	`device_id` text,
	`ip_address` text,
	`request_size` integer,
	`response_size` integer,
	`error_message` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE INDEX `api_request_logs_created_idx` ON `api_request_logs` (`created_at`);--> statement-breakpoint
CREATE INDEX `api_request_logs_endpoint_created_idx` ON `api_request_logs` (`endpoint`,`created_at`);--> statement-breakpoint
CREATE TABLE `audit_logs` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`event_type` text NOT NULL,
	`category` text NOT NULL,
	`severity` text DEFAULT 'info' NOT NULL,
	`description` text,
	`user_id` integer,
	`job_id` text,
	`device_id` text,
	`site_id` text,
	`event_metadata` text,
	`ip_address` text,
	`user_agent` text,
	`session_id` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE INDEX `audit_logs_created_idx` ON `audit_logs` (`created_at`);--> statement-breakpoint
CREATE INDEX `audit_logs_site_created_idx` ON `audit_logs` (`site_id`,`created_at`);--> statement-breakpoint
CREATE INDEX `audit_logs_type_created_idx` ON `audit_logs` (`event_type`,`created_at`);--> statement-breakpoint
CREATE INDEX `audit_logs_device_created_idx` ON `audit_logs` (`device_id`,`created_at`);--> statement-breakpoint
CREATE TABLE `device_metrics` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`device_id` text NOT NULL,
	`site_id` text NOT NULL,
	`cpu_usage` real,
	`memory_usage` real,
	`disk_usage` real,
	`temperature` real,
	`network_latency_ms` real,
	`transaction_count` integer,
	`uptime_seconds` integer,
	`error_rate` real,
	`recorded_at` text NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `device_metrics_device_uq` ON `device_metrics` (`device_id`);--> statement-breakpoint
CREATE INDEX `device_metrics_site_idx` ON `device_metrics` (`site_id`);--> statement-breakpoint
CREATE TABLE `device_state_history` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`device_id` text NOT NULL,
	`site_id` text,
	`previous_state` text,
	`new_state` text NOT NULL,
	`changed_by` text NOT NULL,
	`reason` text,
	`extra_data` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE INDEX `device_state_history_device_ts_idx` ON `device_state_history` (`device_id`,`created_at`);--> statement-breakpoint
CREATE TABLE `devices` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`device_id` text NOT NULL,
	`site_id` text NOT NULL,
	`name` text NOT NULL,
	`device_type` text DEFAULT 'pos_terminal' NOT NULL,
	`status` text DEFAULT 'offline' NOT NULL,
	`ip_address` text,
	`os_type` text,
	`os_version` text,
	`api_key_hash` text,
	`enrollment_method` text DEFAULT 'manual' NOT NULL,
	`device_source` text DEFAULT 'real' NOT NULL,
	`lifecycle_state` text DEFAULT 'active' NOT NULL,
	`heartbeat_interval_s` integer DEFAULT 10 NOT NULL,
	`mac_address` text,
	`hostname` text,
	`local_ip` text,
	`os_details` text,
	`firmware` text,
	`dna` text,
	`dna_updated_at` text,
	`last_seen` text,
	`created_by` integer,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `devices_device_id_uq` ON `devices` (`device_id`);--> statement-breakpoint
CREATE INDEX `devices_site_created_idx` ON `devices` (`site_id`,`created_at`);--> statement-breakpoint
CREATE INDEX `devices_site_name_idx` ON `devices` (`site_id`,`name`);--> statement-breakpoint
CREATE TABLE `enrolment_intents` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`intent_id` text NOT NULL,
	`site_id` text NOT NULL,
	`status` text DEFAULT 'pending' NOT NULL,
	`expected_device_identity` text,
	`idempotency_key` text,
	`request_fingerprint` text,
	`claim_token_hash` text NOT NULL,
	`expires_at` text NOT NULL,
	`created_by` integer,
	`device_id` text,
	`epoch_id` text,
	`claimed_at` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `enrolment_intents_intent_id_uq` ON `enrolment_intents` (`intent_id`);--> statement-breakpoint
CREATE UNIQUE INDEX `enrolment_intents_idem_uq` ON `enrolment_intents` (`site_id`,`idempotency_key`);--> statement-breakpoint
CREATE INDEX `enrolment_intents_site_created_idx` ON `enrolment_intents` (`site_id`,`created_at`);--> statement-breakpoint
CREATE INDEX `enrolment_intents_status_expiry_idx` ON `enrolment_intents` (`status`,`expires_at`);--> statement-breakpoint
CREATE TABLE `error_logs` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`category` text NOT NULL,
	`severity` text DEFAULT 'error' NOT NULL,
	`error_message` text NOT NULL,
	`stack_trace` text,
	`context` text,
	`resolution_status` text DEFAULT 'open' NOT NULL,
	`request_id` text,
	`user_id` integer,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE INDEX `error_logs_created_idx` ON `error_logs` (`created_at`);--> statement-breakpoint
CREATE TABLE `health_checks` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`device_id` text NOT NULL,
	`site_id` text NOT NULL,
	`status` text NOT NULL,
	`response_time_ms` integer,
	`details` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE INDEX `health_checks_device_created_idx` ON `health_checks` (`device_id`,`created_at`);--> statement-breakpoint
CREATE TABLE `job_executions` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`job_id` text NOT NULL,
	`device_id` text NOT NULL,
	`command_id` text,
	`status` text DEFAULT 'pending' NOT NULL,
	`result` text,
	`error_message` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`completed_at` text
);
--> statement-breakpoint
CREATE UNIQUE INDEX `job_executions_uq` ON `job_executions` (`job_id`,`device_id`);--> statement-breakpoint
CREATE INDEX `job_executions_command_idx` ON `job_executions` (`command_id`);--> statement-breakpoint
CREATE TABLE `job_outcomes` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`job_id` text NOT NULL,
	`job_type` text,
	`device_id` text,
	`status` text NOT NULL,
	`duration_ms` integer,
	`initiated_by` text,
	`error_code` text,
	`retry_count` integer DEFAULT 0 NOT NULL,
	`metadata` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE INDEX `job_outcomes_ts_idx` ON `job_outcomes` (`created_at`);--> statement-breakpoint
CREATE INDEX `job_outcomes_job_idx` ON `job_outcomes` (`job_id`);--> statement-breakpoint
CREATE TABLE `jobs` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`job_id` text NOT NULL,
	`site_id` text NOT NULL,
	`action` text NOT NULL,
	`description` text,
	`priority` text DEFAULT 'medium' NOT NULL,
	`status` text DEFAULT 'queued' NOT NULL,
	`segment` text,
	`config_url` text,
	`config_version` text,
	`target_device_ids` text,
	`device_type` text,
	`deadline_at` text,
	`created_by` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`started_at` text,
	`completed_at` text,
	`result` text,
	`error_message` text,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `jobs_job_id_uq` ON `jobs` (`job_id`);--> statement-breakpoint
CREATE INDEX `jobs_site_created_idx` ON `jobs` (`site_id`,`created_at`);--> statement-breakpoint
CREATE INDEX `jobs_status_idx` ON `jobs` (`status`,`created_at`);--> statement-breakpoint
CREATE TABLE `lifecycle_epochs` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`epoch_id` text NOT NULL,
	`device_id` text NOT NULL,
	`site_id` text NOT NULL,
	`enrollment_method` text NOT NULL,
	`intent_id` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`ended_at` text
);
--> statement-breakpoint
CREATE UNIQUE INDEX `lifecycle_epochs_epoch_id_uq` ON `lifecycle_epochs` (`epoch_id`);--> statement-breakpoint
CREATE INDEX `lifecycle_epochs_device_idx` ON `lifecycle_epochs` (`device_id`);--> statement-breakpoint
CREATE TABLE `service_versions` (
	`version` text PRIMARY KEY NOT NULL,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`superseded_at` text
);
--> statement-breakpoint
CREATE TABLE `site_bootstrap_keys` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`site_id` text NOT NULL,
	`key_hash` text NOT NULL,
	`created_by` integer,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`revoked_at` text
);
--> statement-breakpoint
CREATE INDEX `site_bootstrap_keys_site_idx` ON `site_bootstrap_keys` (`site_id`,`created_at`);--> statement-breakpoint
CREATE TABLE `site_memberships` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`site_id` text NOT NULL,
	`user_id` integer NOT NULL,
	`role` text NOT NULL,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `site_memberships_uq` ON `site_memberships` (`site_id`,`user_id`);--> statement-breakpoint
CREATE INDEX `site_memberships_user_idx` ON `site_memberships` (`user_id`);--> statement-breakpoint
CREATE TABLE `sites` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`site_id` text NOT NULL,
	`name` text NOT NULL,
	`description` text,
	`location` text,
	`is_active` integer DEFAULT true NOT NULL,
	`tenant_id` text,
	`created_by` integer,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `sites_site_id_uq` ON `sites` (`site_id`);--> statement-breakpoint
CREATE INDEX `sites_tenant_idx` ON `sites` (`tenant_id`);--> statement-breakpoint
CREATE INDEX `sites_created_at_idx` ON `sites` (`created_at`);--> statement-breakpoint
CREATE TABLE `tenant_memberships` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`tenant_id` text NOT NULL,
	`user_id` integer NOT NULL,
	`role` text NOT NULL,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `tenant_memberships_uq` ON `tenant_memberships` (`tenant_id`,`user_id`);--> statement-breakpoint
CREATE INDEX `tenant_memberships_user_idx` ON `tenant_memberships` (`user_id`);--> statement-breakpoint
CREATE TABLE `tenants` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`tenant_id` text NOT NULL,
	`name` text NOT NULL,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `tenants_tenant_id_uq` ON `tenants` (`tenant_id`);--> statement-breakpoint
CREATE TABLE `user_activities` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`user_id` integer NOT NULL,
	`activity_type` text NOT NULL,
	`page_url` text,
	`element_id` text,
	`search_query` text,
	`session_id` text,
	`duration_ms` integer,
	`extra_data` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE INDEX `user_activities_user_created_idx` ON `user_activities` (`user_id`,`created_at`);--> statement-breakpoint
CREATE TABLE `users` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`email` text NOT NULL,
	`username` text NOT NULL,
	`full_name` text,
	`password_hash` text,
	`is_admin` integer DEFAULT false NOT NULL,
	`is_active` integer DEFAULT true NOT NULL,
	`oidc_subject` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')) NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `users_email_uq` ON `users` (`email`);--> statement-breakpoint
CREATE UNIQUE INDEX `users_username_uq` ON `users` (`username`);--> statement-breakpoint
CREATE UNIQUE INDEX `users_oidc_subject_uq` ON `users` (`oidc_subject`);--> statement-breakpoint
CREATE TABLE `ws_tickets` (
	`ticket_hash` text PRIMARY KEY NOT NULL,
	`site_id` text NOT NULL,
	`user_id` integer NOT NULL,
	`expires_at` text NOT NULL
);
