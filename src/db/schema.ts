import { sql } from "drizzle-orm";
import { index, integer, primaryKey, real, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";
import type { LifecycleChange } from "../shared/device-lifecycle";

// Timestamps are ISO 8601 UTC strings with a `Z`: they sort lexically, read well in SQL and
// round-trip through JSON unchanged.
const createdAt = () => text("created_at").notNull().default(sql`(strftime('%Y-%m-%dT%H:%M:%fZ','now'))`);
const updatedAt = () => text("updated_at").notNull().default(sql`(strftime('%Y-%m-%dT%H:%M:%fZ','now'))`);
const json = (name: string) => text(name, { mode: "json" });
// E-mails, usernames, site ids and device ids are unique regardless of ASCII case: a unique index
// on (lower(value), case_fold_exempt). The column is 0 for every row but the later members of a
// group that already differed only in case when the rule arrived (migrations/0005_bounds.sql);
// those keep their own id there, so they stay as they were without colliding.
const caseFoldExempt = () => integer("case_fold_exempt").notNull().default(0);

export const users = sqliteTable("users", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  email: text("email").notNull(),
  username: text("username").notNull(),
  fullName: text("full_name"),
  passwordHash: text("password_hash"),
  isAdmin: integer("is_admin", { mode: "boolean" }).notNull().default(false),
  isActive: integer("is_active", { mode: "boolean" }).notNull().default(true),
  /** The OpenID Connect identity this account signs in with: the provider's issuer and its `sub` there. */
  oidcIssuer: text("oidc_issuer"),
  oidcSubject: text("oidc_subject"),
  caseFoldExempt: caseFoldExempt(),
  createdAt: createdAt(),
  updatedAt: updatedAt(),
}, (t) => [
  uniqueIndex("users_email_uq").on(t.email),
  uniqueIndex("users_username_uq").on(t.username),
  uniqueIndex("users_email_ci_uq").on(sql`lower(${t.email})`, t.caseFoldExempt),
  uniqueIndex("users_username_ci_uq").on(sql`lower(${t.username})`, t.caseFoldExempt),
  uniqueIndex("users_oidc_identity_uq").on(t.oidcIssuer, t.oidcSubject),
]);

export const tenants = sqliteTable("tenants", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  tenantId: text("tenant_id").notNull(),
  name: text("name").notNull(),
  createdAt: createdAt(),
}, (t) => [uniqueIndex("tenants_tenant_id_uq").on(t.tenantId)]);

export const tenantMemberships = sqliteTable("tenant_memberships", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  tenantId: text("tenant_id").notNull(),
  userId: integer("user_id").notNull(),
  role: text("role", { enum: ["viewer", "operator", "owner"] }).notNull(),
  createdAt: createdAt(),
}, (t) => [
  uniqueIndex("tenant_memberships_uq").on(t.tenantId, t.userId),
  index("tenant_memberships_user_idx").on(t.userId),
]);

// Pending invitations to a site or tenant role, by e-mail (lowercased). An invitation says nothing
// about whether an account has that address: it is applied when one signs up or logs in with it.
export const invitations = sqliteTable("invitations", {
  invitationId: text("invitation_id").primaryKey(),
  scope: text("scope", { enum: ["site", "tenant"] }).notNull(),
  targetId: text("target_id").notNull(),
  email: text("email").notNull(),
  role: text("role", { enum: ["viewer", "operator", "owner"] }).notNull(),
  invitedBy: integer("invited_by"),
  createdAt: createdAt(),
  expiresAt: text("expires_at").notNull(),
  /** SHA-256 of the invitation code handed to the inviter once; the invitee accepts with the code. */
  codeDigest: text("code_digest"),
}, (t) => [
  uniqueIndex("invitations_target_email_uq").on(t.scope, t.targetId, t.email),
  index("invitations_email_idx").on(t.email),
  uniqueIndex("invitations_code_digest_uq").on(t.codeDigest),
]);

export const sites = sqliteTable("sites", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  siteId: text("site_id").notNull(),
  name: text("name").notNull(),
  description: text("description"),
  location: text("location"),
  isActive: integer("is_active", { mode: "boolean" }).notNull().default(true),
  tenantId: text("tenant_id"),
  createdBy: integer("created_by"),
  caseFoldExempt: caseFoldExempt(),
  /** IANA time zone of the store (rollout start windows are in its local time). */
  timeZone: text("time_zone").notNull().default("UTC"),
  createdAt: createdAt(),
  updatedAt: updatedAt(),
}, (t) => [
  uniqueIndex("sites_site_id_uq").on(t.siteId),
  uniqueIndex("sites_site_id_ci_uq").on(sql`lower(${t.siteId})`, t.caseFoldExempt),
  index("sites_tenant_idx").on(t.tenantId),
  index("sites_created_at_idx").on(t.createdAt),
]);

export const siteMemberships = sqliteTable("site_memberships", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  siteId: text("site_id").notNull(),
  userId: integer("user_id").notNull(),
  role: text("role", { enum: ["viewer", "operator", "owner"] }).notNull(),
  createdAt: createdAt(),
}, (t) => [
  uniqueIndex("site_memberships_uq").on(t.siteId, t.userId),
  index("site_memberships_user_idx").on(t.userId),
]);

export const devices = sqliteTable("devices", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  deviceId: text("device_id").notNull(),
  siteId: text("site_id").notNull(),
  name: text("name").notNull(),
  deviceType: text("device_type").notNull().default("pos_terminal"),
  status: text("status").notNull().default("offline"),
  ipAddress: text("ip_address"),
  osType: text("os_type"),
  osVersion: text("os_version"),
  apiKeyHash: text("api_key_hash"),
  enrollmentMethod: text("enrollment_method").notNull().default("manual"),
  deviceSource: text("device_source", { enum: ["real", "simulated"] }).notNull().default("real"),
  lifecycleState: text("lifecycle_state", { enum: ["active", "suspended", "retired", "archived"] }).notNull().default("active"),
  heartbeatIntervalS: integer("heartbeat_interval_s").notNull().default(10),
  macAddress: text("mac_address"),
  hostname: text("hostname"),
  localIp: text("local_ip"),
  osDetails: text("os_details"),
  firmware: text("firmware"),
  dna: json("dna"),
  dnaUpdatedAt: text("dna_updated_at"),
  lastSeen: text("last_seen"),
  /** The device's vendor push token (`device_token` in its DNA) and the platform it is for: fcm or apns. */
  pushToken: text("push_token"),
  pushPlatform: text("push_platform", { enum: ["fcm", "apns"] }),
  /** What the device's owner allows (all five permissions); null until the device first sets them. */
  permissions: json("permissions").$type<Record<string, boolean>>(),
  permissionsUpdatedAt: text("permissions_updated_at"),
  createdBy: integer("created_by"),
  caseFoldExempt: caseFoldExempt(),
  createdAt: createdAt(),
  updatedAt: updatedAt(),
}, (t) => [
  uniqueIndex("devices_device_id_uq").on(t.deviceId),
  uniqueIndex("devices_device_id_ci_uq").on(sql`lower(${t.deviceId})`, t.caseFoldExempt),
  index("devices_site_created_idx").on(t.siteId, t.createdAt),
  index("devices_site_name_idx").on(t.siteId, t.name),
]);

export const lifecycleEpochs = sqliteTable("lifecycle_epochs", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  epochId: text("epoch_id").notNull(),
  deviceId: text("device_id").notNull(),
  siteId: text("site_id").notNull(),
  enrollmentMethod: text("enrollment_method").notNull(),
  intentId: text("intent_id"),
  startedAt: createdAt(),
  endedAt: text("ended_at"),
}, (t) => [
  uniqueIndex("lifecycle_epochs_epoch_id_uq").on(t.epochId),
  index("lifecycle_epochs_device_idx").on(t.deviceId),
]);

export const siteBootstrapKeys = sqliteTable("site_bootstrap_keys", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  siteId: text("site_id").notNull(),
  keyHash: text("key_hash").notNull(),
  createdBy: integer("created_by"),
  createdAt: createdAt(),
  revokedAt: text("revoked_at"),
}, (t) => [index("site_bootstrap_keys_site_idx").on(t.siteId, t.createdAt)]);

export const enrolmentIntents = sqliteTable("enrolment_intents", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  intentId: text("intent_id").notNull(),
  siteId: text("site_id").notNull(),
  status: text("status", { enum: ["pending", "approved", "rejected", "consumed", "expired", "revoked"] }).notNull().default("pending"),
  expectedDeviceIdentity: text("expected_device_identity"),
  idempotencyKey: text("idempotency_key"),
  requestFingerprint: text("request_fingerprint"),
  claimTokenHash: text("claim_token_hash").notNull(),
  expiresAt: text("expires_at").notNull(),
  createdBy: integer("created_by"),
  deviceId: text("device_id"),
  epochId: text("epoch_id"),
  claimedAt: text("claimed_at"),
  createdAt: createdAt(),
  updatedAt: updatedAt(),
}, (t) => [
  uniqueIndex("enrolment_intents_intent_id_uq").on(t.intentId),
  uniqueIndex("enrolment_intents_idem_uq").on(t.siteId, t.idempotencyKey),
  index("enrolment_intents_site_created_idx").on(t.siteId, t.createdAt),
  index("enrolment_intents_status_expiry_idx").on(t.status, t.expiresAt),
]);

// No longer written or read: failed claims are now counted by the intent's CredentialGuard (see
// docs/security.md, "Credential throttling"). The table stays declared so the schema keeps matching
// the database; dropping it would need a migration for no gain.
export const enrolmentClaimFailures = sqliteTable("enrolment_claim_failures", {
  intentId: text("intent_id").primaryKey(),
  windowStartedAt: text("window_started_at").notNull(),
  failures: integer("failures").notNull().default(0),
}, (t) => [index("enrolment_claim_failures_window_idx").on(t.windowStartedAt)]);

export const jobs = sqliteTable("jobs", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  jobId: text("job_id").notNull(),
  siteId: text("site_id").notNull(),
  action: text("action").notNull(),
  description: text("description"),
  priority: text("priority", { enum: ["high", "medium", "low"] }).notNull().default("medium"),
  status: text("status", { enum: ["queued", "sent", "completed", "failed", "cancelled", "timeout"] }).notNull().default("queued"),
  segment: text("segment"),
  configUrl: text("config_url"),
  configVersion: text("config_version"),
  targetDeviceIds: json("target_device_ids"),
  deviceType: text("device_type"),
  deadlineAt: text("deadline_at"),
  createdBy: text("created_by"),
  createdAt: createdAt(),
  startedAt: text("started_at"),
  completedAt: text("completed_at"),
  result: json("result"),
  errorMessage: text("error_message"),
  // An Idempotency-Key given at creation (unique per site) and a digest of the request it came with.
  idempotencyKey: text("idempotency_key"),
  requestFingerprint: text("request_fingerprint"),
  updatedAt: updatedAt(),
  // Set on the jobs a rollout hands to a site (docs/rollouts.md), with any command payload beyond
  // config_url/config_version.
  rolloutId: text("rollout_id"),
  payload: json("payload"),
}, (t) => [
  uniqueIndex("jobs_job_id_uq").on(t.jobId),
  uniqueIndex("jobs_idem_uq").on(t.siteId, t.idempotencyKey),
  index("jobs_site_created_idx").on(t.siteId, t.createdAt),
  index("jobs_status_idx").on(t.status, t.createdAt),
  index("jobs_rollout_idx").on(t.rolloutId),
]);

export const jobExecutions = sqliteTable("job_executions", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  jobId: text("job_id").notNull(),
  deviceId: text("device_id").notNull(),
  commandId: text("command_id"),
  status: text("status").notNull().default("pending"),
  result: json("result"),
  errorMessage: text("error_message"),
  createdAt: createdAt(),
  completedAt: text("completed_at"),
}, (t) => [
  uniqueIndex("job_executions_uq").on(t.jobId, t.deviceId),
  index("job_executions_command_idx").on(t.commandId),
  index("job_executions_device_idx").on(t.deviceId, t.createdAt),
]);

// Where each device command lives. Commands are kept in their site's SiteHub, so a device's poll or
// ack never waits on D1 (docs/architecture.md), and a bare command id (GET /api/v1/commands/{id},
// cancel) is resolved to its site and device here. Written when a command is queued and closed when
// it finishes, both batched by the hub, never on a device's poll; `closed_at IS NULL AND
// expires_at < now` lets the cron find hubs whose commands outlived their TTL.
export const commandIndex = sqliteTable("command_index", {
  commandId: text("command_id").primaryKey(),
  siteId: text("site_id").notNull(),
  deviceId: text("device_id").notNull(),
  expiresAt: text("expires_at").notNull(),
  closedAt: text("closed_at"),
  createdAt: createdAt(),
}, (t) => [index("command_index_open_expiry_idx").on(t.closedAt, t.expiresAt)]);

export const healthChecks = sqliteTable("health_checks", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  deviceId: text("device_id").notNull(),
  siteId: text("site_id").notNull(),
  status: text("status").notNull(),
  responseTimeMs: integer("response_time_ms"),
  details: json("details"),
  createdAt: createdAt(),
}, (t) => [index("health_checks_device_created_idx").on(t.deviceId, t.createdAt)]);

export const auditLogs = sqliteTable("audit_logs", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  eventType: text("event_type").notNull(),
  category: text("category").notNull(),
  severity: text("severity", { enum: ["info", "warning", "error", "critical"] }).notNull().default("info"),
  description: text("description"),
  userId: integer("user_id"),
  jobId: text("job_id"),
  deviceId: text("device_id"),
  siteId: text("site_id"),
  eventMetadata: json("event_metadata"),
  ipAddress: text("ip_address"),
  userAgent: text("user_agent"),
  sessionId: text("session_id"),
  createdAt: createdAt(),
  // When the retention run wrote the event to an archive; null until then (docs/audit-retention.md).
  archivedAt: text("archived_at"),
  /** The hash chain (src/shared/audit-chain.ts): null until the AuditStream object seals the row. */
  prevHash: text("prev_hash"),
  hash: text("hash"),
}, (t) => [
  index("audit_logs_created_idx").on(t.createdAt),
  index("audit_logs_site_id_idx").on(t.siteId, t.id),
  index("audit_logs_site_created_idx").on(t.siteId, t.createdAt),
  index("audit_logs_type_created_idx").on(t.eventType, t.createdAt),
  index("audit_logs_device_created_idx").on(t.deviceId, t.createdAt),
  index("audit_logs_unarchived_created_idx").on(t.createdAt).where(sql`${t.archivedAt} IS NULL`),
]);

export const apiRequestLogs = sqliteTable("api_request_logs", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  requestId: text("request_id"),
  endpoint: text("endpoint").notNull(),
  method: text("method").notNull(),
  statusCode: integer("status_code").notNull(),
  responseTimeMs: real("response_time_ms").notNull(),
  userId: integer("user_id"),
  deviceId: text("device_id"),
  ipAddress: text("ip_address"),
  requestSize: integer("request_size"),
  responseSize: integer("response_size"),
  errorMessage: text("error_message"),
  createdAt: createdAt(),
}, (t) => [
  index("api_request_logs_created_idx").on(t.createdAt),
  index("api_request_logs_endpoint_created_idx").on(t.endpoint, t.createdAt),
]);

export const userActivities = sqliteTable("user_activities", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  userId: integer("user_id").notNull(),
  activityType: text("activity_type").notNull(),
  pageUrl: text("page_url"),
  elementId: text("element_id"),
  searchQuery: text("search_query"),
  sessionId: text("session_id"),
  durationMs: integer("duration_ms"),
  extraData: json("extra_data"),
  createdAt: createdAt(),
}, (t) => [
  index("user_activities_user_created_idx").on(t.userId, t.createdAt),
  index("user_activities_created_idx").on(t.createdAt),
]);

// A device's timeline. `source` says what moved it: its presence (heartbeats and their absence,
// written by the site's hub), a lifecycle change (suspend/resume), or a change someone reported
// through the analytics endpoint; `user_id` is the operator when one did it.
export const deviceStateHistory = sqliteTable("device_state_history", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  deviceId: text("device_id").notNull(),
  siteId: text("site_id"),
  previousState: text("previous_state"),
  newState: text("new_state").notNull(),
  changedBy: text("changed_by").notNull(),
  reason: text("reason"),
  extraData: json("extra_data"),
  source: text("source", { enum: ["presence", "lifecycle", "reported"] }).notNull().default("presence"),
  userId: integer("user_id"),
  timestamp: createdAt(),
}, (t) => [
  index("device_state_history_device_ts_idx").on(t.deviceId, t.timestamp),
  index("device_state_history_created_idx").on(t.timestamp),
]);

// One row per finished job (`scope` job) and per finished device execution of a job (`scope`
// execution), written by the site's hub; rows reported through the analytics endpoint land here too.
export const jobOutcomes = sqliteTable("job_outcomes", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  jobId: text("job_id").notNull(),
  siteId: text("site_id"),
  scope: text("scope", { enum: ["job", "execution"] }).notNull().default("job"),
  jobType: text("job_type"),
  deviceId: text("device_id"),
  status: text("status").notNull(),
  durationMs: integer("duration_ms"),
  initiatedBy: text("initiated_by"),
  errorCode: text("error_code"),
  retryCount: integer("retry_count").notNull().default(0),
  metadata: json("metadata"),
  timestamp: createdAt(),
}, (t) => [
  index("job_outcomes_ts_idx").on(t.timestamp),
  index("job_outcomes_job_idx").on(t.jobId),
]);

// Identical reports (same `fingerprint`: category, message and first stack frame) within a few
// minutes of a row's first sighting are folded into that row: `occurrences` counts them and
// `last_seen_at` is the latest, so a crash loop is one row, not one per report.
export const errorLogs = sqliteTable("error_logs", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  category: text("category").notNull(),
  severity: text("severity").notNull().default("error"),
  errorMessage: text("error_message").notNull(),
  stackTrace: text("stack_trace"),
  context: json("context"),
  resolutionStatus: text("resolution_status", { enum: ["open", "resolved", "ignored"] }).notNull().default("open"),
  requestId: text("request_id"),
  userId: integer("user_id"),
  fingerprint: text("fingerprint"),
  occurrences: integer("occurrences").notNull().default(1),
  lastSeenAt: text("last_seen_at"),
  sessionId: text("session_id"),
  ipAddress: text("ip_address"),
  resolvedAt: text("resolved_at"),
  resolvedBy: integer("resolved_by"),
  createdAt: createdAt(),
}, (t) => [
  index("error_logs_created_idx").on(t.createdAt),
  index("error_logs_fingerprint_idx").on(t.fingerprint, t.createdAt),
  index("error_logs_status_created_idx").on(t.resolutionStatus, t.createdAt),
  // A device's own log lines, by the device id in their context.
  index("error_logs_device_idx").on(sql`json_extract(${t.context}, '$.device_id')`, t.createdAt),
]);

// Error reports per client (address and session) in fixed one-minute windows: the abuse guard of
// the unauthenticated error endpoint. Old windows are dropped by the cron.
export const errorReportWindows = sqliteTable("error_report_windows", {
  clientKey: text("client_key").notNull(),
  windowStart: text("window_start").notNull(),
  reports: integer("reports").notNull().default(0),
}, (t) => [primaryKey({ columns: [t.windowStart, t.clientKey] })]);

// Rollups: what the metrics queries read, so their cost depends on how many routes, job types and
// error kinds there are, never on how much traffic there was (docs/analytics.md). Each is kept per
// hour and per day (`period`), both added to by every write; `bucket_start` is the period's start.
// Histograms are JSON objects of log-scale bucket index → count (src/shared/rollups.ts).

/** API requests by route template, method and status class (2 = 2xx …). */
export const requestRollups = sqliteTable("request_rollups", {
  period: text("period", { enum: ["hour", "day"] }).notNull(),
  bucketStart: text("bucket_start").notNull(),
  route: text("route").notNull(),
  method: text("method").notNull(),
  statusClass: integer("status_class").notNull(),
  count: integer("count").notNull(),
  sumMs: real("sum_ms").notNull(),
  minMs: real("min_ms").notNull(),
  maxMs: real("max_ms").notNull(),
  histogram: text("histogram").notNull(),
  /** How many isolate flushes were added into this row: the D1 writes it cost. */
  flushes: integer("flushes").notNull().default(1),
}, (t) => [primaryKey({ columns: [t.period, t.bucketStart, t.route, t.method, t.statusClass] })]);

/** Job outcomes by site, job type, scope (job or execution) and status; durations in ms. */
export const jobOutcomeRollups = sqliteTable("job_outcome_rollups", {
  period: text("period", { enum: ["hour", "day"] }).notNull(),
  bucketStart: text("bucket_start").notNull(),
  siteId: text("site_id").notNull(),
  jobType: text("job_type").notNull(),
  scope: text("scope", { enum: ["job", "execution"] }).notNull(),
  status: text("status").notNull(),
  count: integer("count").notNull(),
  /** Outcomes that reported a duration (the others count, but not towards the durations). */
  timedCount: integer("timed_count").notNull(),
  sumDurationMs: real("sum_duration_ms").notNull(),
  minDurationMs: real("min_duration_ms"),
  maxDurationMs: real("max_duration_ms"),
  histogram: text("histogram").notNull(),
}, (t) => [primaryKey({ columns: [t.period, t.bucketStart, t.siteId, t.jobType, t.scope, t.status] })]);

/** Error occurrences per hour by category and severity. */
export const errorRollups = sqliteTable("error_rollups", {
  bucketStart: text("bucket_start").notNull(),
  category: text("category").notNull(),
  severity: text("severity").notNull(),
  count: integer("count").notNull(),
}, (t) => [primaryKey({ columns: [t.bucketStart, t.category, t.severity] })]);

// The latest sample per device; the history lives in the site's SiteHub, because a device's history
// (~26k rows over 90 days at delta storage) would not fit one shared database for a whole fleet
// (docs/architecture.md, "Where data lives").
export const deviceMetrics = sqliteTable("device_metrics", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  deviceId: text("device_id").notNull(),
  siteId: text("site_id").notNull(),
  cpuUsage: real("cpu_usage"),
  memoryUsage: real("memory_usage"),
  diskUsage: real("disk_usage"),
  temperature: real("temperature"),
  networkLatencyMs: real("network_latency_ms"),
  transactionCount: integer("transaction_count"),
  uptimeSeconds: integer("uptime_seconds"),
  errorRate: real("error_rate"),
  recordedAt: text("recorded_at").notNull(),
  updatedAt: updatedAt(),
}, (t) => [
  uniqueIndex("device_metrics_device_uq").on(t.deviceId),
  index("device_metrics_site_idx").on(t.siteId),
]);

// One row per deployed version, so system_startup / system_shutdown are recorded once each even
// when many isolates serve their first request at the same moment.
export const serviceVersions = sqliteTable("service_versions", {
  version: text("version").primaryKey(),
  startedAt: createdAt(),
  supersededAt: text("superseded_at"),
});

// One-use tickets for browser WebSocket subscriptions (hash stored, never the ticket).
export const wsTickets = sqliteTable("ws_tickets", {
  ticketHash: text("ticket_hash").primaryKey(),
  siteId: text("site_id").notNull(),
  userId: integer("user_id").notNull(),
  expiresAt: text("expires_at").notNull(),
});

// The agents projection (the live agent state itself lives in the site's SiteHub): each device's
// agent lifecycle state, config version and last health check, written by the site's SiteHub on
// transitions only, so `GET /agents` reads one table instead of calling every site's Durable Object.
// Device fields (type, status, site) come from `devices`; a device without a row has never changed
// state (idle/derived).
export const agents = sqliteTable("agents", {
  deviceId: text("device_id").primaryKey(),
  siteId: text("site_id").notNull(),
  source: text("source", { enum: ["real", "simulated"] }).notNull(),
  state: text("state", { enum: ["idle", "downloading", "updating", "restarting", "health_check", "ready"] }).notNull().default("idle"),
  configVersion: text("config_version"),
  targetVersion: text("target_version"),
  healthStatus: text("health_status"),
  lastHealthCheck: json("last_health_check"),
  lastHealthAt: text("last_health_at"),
  bootedAt: text("booted_at"),
  stateChangedAt: text("state_changed_at").notNull(),
  updatedAt: updatedAt(),
}, (t) => [
  index("agents_site_state_idx").on(t.siteId, t.state),
]);

// Audit retention (docs/audit-retention.md): the one policy row (absent until an administrator sets
// one), one row per archive object written to the AUDIT_ARCHIVE bucket, and the runs that did work.
export const auditRetentionPolicy = sqliteTable("audit_retention_policy", {
  id: integer("id").primaryKey(),
  retentionDays: integer("retention_days").notNull(),
  archiveAfterDays: integer("archive_after_days"),
  compressArchives: integer("compress_archives", { mode: "boolean" }).notNull(),
  encryptionRequired: integer("encryption_required", { mode: "boolean" }).notNull(),
  updatedBy: integer("updated_by"),
  updatedAt: text("updated_at").notNull(),
});

export const auditArchives = sqliteTable("audit_archives", {
  archiveId: text("archive_id").primaryKey(),
  day: text("day").notNull(),
  firstEventId: integer("first_event_id").notNull(),
  lastEventId: integer("last_event_id").notNull(),
  events: integer("events").notNull(),
  bytes: integer("bytes").notNull(),
  compressed: integer("compressed", { mode: "boolean" }).notNull(),
  encrypted: integer("encrypted", { mode: "boolean" }).notNull(),
  createdAt: text("created_at").notNull(),
}, (t) => [
  index("audit_archives_day_idx").on(t.day),
]);

export const auditRetentionRuns = sqliteTable("audit_retention_runs", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  trigger: text("trigger", { enum: ["cron", "optimize"] }).notNull(),
  startedAt: text("started_at").notNull(),
  finishedAt: text("finished_at").notNull(),
  archivedEvents: integer("archived_events").notNull(),
  archiveObjects: integer("archive_objects").notNull(),
  deletedEvents: integer("deleted_events").notNull(),
  error: text("error"),
}, (t) => [
  index("audit_retention_runs_started_idx").on(t.startedAt),
]);
// One row per push sent through /api/v1/push: what was asked and, per target device, how it went
// out (status, channel, the command carrying it, why it failed). The targets' live status is read
// from their commands when the push is looked at; this row keeps what was known when it was sent.
export const pushDeliveries = sqliteTable("push_deliveries", {
  pushId: text("push_id").primaryKey(),
  kind: text("kind", { enum: ["send", "bulk"] }).notNull(),
  createdByUserId: integer("created_by_user_id").notNull(),
  createdBy: text("created_by").notNull(),
  /** Every site a target belongs to: who may read the push. */
  siteIds: json("site_ids").$type<string[]>().notNull(),
  notifications: json("notifications").$type<unknown[]>().notNull(),
  targets: json("targets").$type<unknown[]>().notNull(),
  /** An Idempotency-Key given with the send (unique per user) and a digest of the request it came with. */
  idempotencyKey: text("idempotency_key"),
  requestFingerprint: text("request_fingerprint"),
  createdAt: createdAt(),
}, (t) => [
  uniqueIndex("push_deliveries_idem_uq").on(t.createdByUserId, t.idempotencyKey),
  index("push_deliveries_created_idx").on(t.createdAt),
]);

// A signed-in user's Web Push subscription: the browser's push-service endpoint and the keys its
// payloads are encrypted for. Removed when its owner deletes it or the push service says it is gone.
export const pushSubscriptions = sqliteTable("push_subscriptions", {
  subscriptionId: text("subscription_id").primaryKey(),
  userId: integer("user_id").notNull(),
  endpoint: text("endpoint").notNull(),
  p256dh: text("p256dh").notNull(),
  auth: text("auth").notNull(),
  createdAt: createdAt(),
  lastSentAt: text("last_sent_at"),
}, (t) => [
  uniqueIndex("push_subscriptions_user_endpoint_uq").on(t.userId, t.endpoint),
]);

// How far the minute cron has read device_state_history for device-offline notifications.
export const pushNotifierCursor = sqliteTable("push_notifier_cursor", {
  name: text("name").primaryKey(),
  lastId: integer("last_id").notNull(),
});
// Fleet-wide rollouts (docs/rollouts.md). The row is the record operators list; the live state
// (waves, per-device progress) is in the rollout's RolloutOrchestrator Durable Object, which writes
// the status back here on every transition.
export const rollouts = sqliteTable("rollouts", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  rolloutId: text("rollout_id").notNull(),
  name: text("name").notNull(),
  tenantId: text("tenant_id"),
  siteIds: json("site_ids").notNull(),
  action: text("action").notNull(),
  /** The request with every default filled in. */
  spec: json("spec").notNull(),
  /** What the orchestrator was handed (targets and waves), so the cron can hand it over again. */
  plan: json("plan").notNull(),
  status: text("status", { enum: ["scheduled", "running", "paused", "completed", "aborted"] }).notNull().default("scheduled"),
  currentWave: integer("current_wave").notNull().default(0),
  totalDevices: integer("total_devices").notNull().default(0),
  abortReason: text("abort_reason"),
  createdBy: integer("created_by").notNull(),
  createdByEmail: text("created_by_email"),
  idempotencyKey: text("idempotency_key"),
  requestFingerprint: text("request_fingerprint"),
  createdAt: createdAt(),
  updatedAt: updatedAt(),
  finishedAt: text("finished_at"),
}, (t) => [
  uniqueIndex("rollouts_rollout_id_uq").on(t.rolloutId),
  uniqueIndex("rollouts_idem_uq").on(t.createdBy, t.idempotencyKey),
  index("rollouts_status_updated_idx").on(t.status, t.updatedAt),
  index("rollouts_created_idx").on(t.createdAt),
]);

/** The sites a rollout targets, so "rollouts I can see" is one join. */
export const rolloutSites = sqliteTable("rollout_sites", {
  rolloutId: text("rollout_id").notNull(),
  siteId: text("site_id").notNull(),
}, (t) => [
  primaryKey({ columns: [t.rolloutId, t.siteId] }),
  index("rollout_sites_site_idx").on(t.siteId),
]);

// The assistant's memory: each user's persona, and their last exchanges (at most five are kept,
// each for a day) given back to the assistant as context. See docs/ai.md.
export const aiPreferences = sqliteTable("ai_preferences", {
  userId: integer("user_id").primaryKey(),
  mode: text("mode", { enum: ["Maintenance", "Predictive", "Executive"] }).notNull(),
  updatedAt: updatedAt(),
});

export const aiExchanges = sqliteTable("ai_exchanges", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  userId: integer("user_id").notNull(),
  query: text("query").notNull(),
  response: text("response").notNull(),
  intent: text("intent").notNull(),
  deviceIds: json("device_ids").$type<string[]>().notNull(),
  createdAt: createdAt(),
  expiresAt: text("expires_at").notNull(),
}, (t) => [
  index("ai_exchanges_user_created").on(t.userId, t.createdAt),
  index("ai_exchanges_expires").on(t.expiresAt),
]);

// Device twins (docs/twins.md): the durable record of each device's own desired document and of
// the templates layered under it. Reported state and the effective document live in the site hub;
// `in_sync` mirrors the hub's verdict so drift can be queried across sites.
export const deviceTwins = sqliteTable("device_twins", {
  deviceId: text("device_id").primaryKey(),
  siteId: text("site_id").notNull(),
  desired: text("desired").notNull().default("{}"),
  version: integer("version").notNull().default(0),
  inSync: integer("in_sync", { mode: "boolean" }).notNull().default(true),
  updatedAt: updatedAt(),
}, (t) => [
  index("device_twins_site_sync_idx").on(t.siteId, t.inSync),
]);

/** A site's template (scope `site`, segment '') or a tenant's template for one device type (scope `tenant`). */
export const twinTemplates = sqliteTable("twin_templates", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  scope: text("scope", { enum: ["site", "tenant"] }).notNull(),
  scopeId: text("scope_id").notNull(),
  segment: text("segment").notNull().default(""),
  document: text("document").notNull(),
  version: integer("version").notNull().default(1),
  updatedBy: integer("updated_by"),
  updatedAt: updatedAt(),
}, (t) => [
  uniqueIndex("twin_templates_scope_uq").on(t.scope, t.scopeId, t.segment),
]);

// Retire, transfer, re-enrol, archive and purge requests that came with an Idempotency-Key (unique
// per user): the answer given, so a retry is answered the same without acting twice. A one-time
// api_key is never stored here (docs/device-lifecycle.md).
export const deviceLifecycleRequests = sqliteTable("device_lifecycle_requests", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  userId: integer("user_id").notNull(),
  idempotencyKey: text("idempotency_key").notNull(),
  deviceId: text("device_id").notNull(),
  siteId: text("site_id").notNull(),
  action: text("action").notNull(),
  requestFingerprint: text("request_fingerprint").notNull(),
  statusCode: integer("status_code").notNull(),
  response: json("response").$type<LifecycleChange>().notNull(),
  createdAt: createdAt(),
}, (t) => [
  uniqueIndex("device_lifecycle_requests_idem_uq").on(t.userId, t.idempotencyKey),
  index("device_lifecycle_requests_device_idx").on(t.deviceId),
]);
// ---- audit alerts (docs/audit.md, "Alerts") ---------------------------------------------------

// Alert rules over the audit trail, evaluated by the AuditStream Durable Object as events are
// published. The webhook secret is sealed (src/shared/secret-box.ts), never stored in the clear.
export const auditAlertRules = sqliteTable("audit_alert_rules", {
  id: text("id").primaryKey(),
  alertName: text("alert_name").notNull(),
  eventTypes: json("event_types").$type<string[]>().notNull(),
  threshold: integer("threshold").notNull(),
  timeWindowS: integer("time_window_s").notNull(),
  siteId: text("site_id"),
  severities: json("severities").$type<string[] | null>(),
  cooldownS: integer("cooldown_s").notNull(),
  enabled: integer("enabled", { mode: "boolean" }).notNull().default(true),
  webhookUrl: text("webhook_url"),
  webhookSecret: text("webhook_secret"),
  email: text("email"),
  createdBy: integer("created_by"),
  createdAt: createdAt(),
  updatedAt: updatedAt(),
});

// Every try of every alert notification and integration forward: one row per try, the last one says
// delivered or failed. `ruleId` is the alert rule's or the integration's id.
export const auditAlertDeliveries = sqliteTable("audit_alert_deliveries", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  ruleId: text("rule_id").notNull(),
  firingId: text("firing_id").notNull(),
  channel: text("channel", { enum: ["webhook", "email", "syslog"] }).notNull(),
  attempt: integer("attempt").notNull(),
  outcome: text("outcome", { enum: ["delivered", "retrying", "failed"] }).notNull(),
  httpStatus: integer("http_status"),
  error: text("error"),
  nextAttemptAt: text("next_attempt_at"),
  createdAt: createdAt(),
}, (t) => [
  index("audit_alert_deliveries_rule_idx").on(t.ruleId, t.id),
]);

// Destinations that receive every audit event their filter lets through (docs/audit.md, "Integrations").
export const auditIntegrations = sqliteTable("audit_integrations", {
  id: text("id").primaryKey(),
  type: text("type", { enum: ["syslog", "webhook"] }).notNull(),
  destination: text("destination").notNull(),
  format: text("format", { enum: ["rfc5424", "json"] }).notNull(),
  severities: json("severities").$type<string[] | null>(),
  categories: json("categories").$type<string[] | null>(),
  webhookSecret: text("webhook_secret"),
  createdBy: integer("created_by"),
  createdAt: createdAt(),
});

// What a device changed in its own configuration, as its agent reports it (docs/original-agents.md).
export const deviceConfigHistory = sqliteTable("device_config_history", {
  id: integer("id").primaryKey({ autoIncrement: true }),
  deviceId: text("device_id").notNull(),
  siteId: text("site_id").notNull(),
  action: text("action").notNull(),
  parameterName: text("parameter_name").notNull(),
  oldValue: json("old_value"),
  newValue: json("new_value"),
  success: integer("success", { mode: "boolean" }).notNull(),
  changeReason: text("change_reason"),
  performanceBefore: json("performance_before"),
  performanceAfter: json("performance_after"),
  wasRolledBack: integer("was_rolled_back", { mode: "boolean" }).notNull().default(false),
  rollbackReason: text("rollback_reason"),
  rollbackSuccess: integer("rollback_success", { mode: "boolean" }),
  rollbackPerformance: json("rollback_performance"),
  rolledBackAt: text("rolled_back_at"),
  changedAt: text("changed_at").notNull(),
  createdAt: createdAt(),
}, (t) => [index("device_config_history_device_idx").on(t.deviceId, t.changedAt)]);
