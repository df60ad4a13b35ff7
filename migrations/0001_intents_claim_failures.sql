CREATE TABLE `enrolment_claim_failures` (
	`intent_id` text PRIMARY KEY NOT NULL,
	`window_started_at` text NOT NULL,
	`failures` integer DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE INDEX `enrolment_claim_failures_window_idx` ON `enrolment_claim_failures` (`window_started_at`);