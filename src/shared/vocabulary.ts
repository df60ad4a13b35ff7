/**
 * The words the Worker and the site hubs share: audit event types and their classification, command
 * and job states, agent states and push actions. Both sides import this module; it imports nothing
 * of either, so the dependency arrows only point down to it.
 */

// ---- audit ------------------------------------------------------------------------------------

export const SEVERITIES = ["info", "warning", "error", "critical"] as const;
export type Severity = (typeof SEVERITIES)[number];

export const CATEGORIES = [
  "security_events",
  "user_actions",
  "site_management",
  "device_management",
  "job_management",
  "system_events",
  "business_events",
] as const;
export type Category = (typeof CATEGORIES)[number];

/** Each known event type's category and default severity; docs/architecture.md lists who emits what. */
const CATALOGUE: Record<string, { category: Category; severity: Severity }> = {
  login_attempt: { category: "security_events", severity: "info" },
  login_success: { category: "security_events", severity: "info" },
  login_failed: { category: "security_events", severity: "warning" },
  unauthorized_access: { category: "security_events", severity: "critical" },
  api_access: { category: "security_events", severity: "info" },
  permission_denied: { category: "security_events", severity: "warning" },
  user_created: { category: "user_actions", severity: "info" },
  user_deleted: { category: "user_actions", severity: "warning" },
  user_deactivated: { category: "user_actions", severity: "warning" },
  user_activated: { category: "user_actions", severity: "info" },
  site_created: { category: "site_management", severity: "info" },
  site_member_added: { category: "site_management", severity: "info" },
  site_member_removed: { category: "site_management", severity: "info" },
  site_member_invited: { category: "site_management", severity: "info" },
  site_invitation_revoked: { category: "site_management", severity: "info" },
  tenant_created: { category: "site_management", severity: "info" },
  tenant_member_added: { category: "site_management", severity: "info" },
  tenant_member_removed: { category: "site_management", severity: "info" },
  tenant_member_invited: { category: "site_management", severity: "info" },
  tenant_invitation_revoked: { category: "site_management", severity: "info" },
  bootstrap_key_created: { category: "site_management", severity: "info" },
  bootstrap_key_revoked: { category: "site_management", severity: "warning" },
  device_registered: { category: "device_management", severity: "info" },
  device_updated: { category: "device_management", severity: "info" },
  device_health_check: { category: "device_management", severity: "info" },
  device_offline: { category: "device_management", severity: "warning" },
  device_online: { category: "device_management", severity: "info" },
  device_error: { category: "device_management", severity: "error" },
  device_restart: { category: "device_management", severity: "info" },
  device_key_rotated: { category: "device_management", severity: "warning" },
  device_suspended: { category: "device_management", severity: "warning" },
  device_resumed: { category: "device_management", severity: "info" },
  // Device lifecycle beyond suspend/resume (docs/device-lifecycle.md)
  device_retired: { category: "device_management", severity: "warning" },
  device_transferred: { category: "device_management", severity: "warning" },
  device_reenrolled: { category: "device_management", severity: "warning" },
  device_archived: { category: "device_management", severity: "warning" },
  device_purged: { category: "device_management", severity: "critical" },
  agent_push: { category: "device_management", severity: "info" },
  push_sent: { category: "device_management", severity: "info" },
  agent_update_failed: { category: "device_management", severity: "error" },
  command_queued: { category: "device_management", severity: "info" },
  command_delivered: { category: "device_management", severity: "info" },
  command_lease_expired: { category: "device_management", severity: "info" },
  command_acknowledged: { category: "device_management", severity: "info" },
  command_completed: { category: "device_management", severity: "info" },
  command_failed: { category: "device_management", severity: "warning" },
  command_expired: { category: "device_management", severity: "warning" },
  command_cancelled: { category: "device_management", severity: "warning" },
  permission_change: { category: "device_management", severity: "info" },
  job_created: { category: "job_management", severity: "info" },
  job_started: { category: "job_management", severity: "info" },
  job_completed: { category: "job_management", severity: "info" },
  job_failed: { category: "job_management", severity: "error" },
  job_cancelled: { category: "job_management", severity: "warning" },
  job_timeout: { category: "job_management", severity: "error" },
  site_updated: { category: "site_management", severity: "info" },
  rollout_created: { category: "job_management", severity: "info" },
  rollout_started: { category: "job_management", severity: "info" },
  rollout_paused: { category: "job_management", severity: "warning" },
  rollout_resumed: { category: "job_management", severity: "info" },
  rollout_promoted: { category: "job_management", severity: "info" },
  rollout_aborted: { category: "job_management", severity: "error" },
  rollout_completed: { category: "job_management", severity: "info" },
  system_startup: { category: "system_events", severity: "info" },
  system_shutdown: { category: "system_events", severity: "info" },
  admin_action: { category: "user_actions", severity: "info" },
  config_updated: { category: "system_events", severity: "info" },
  transaction_processed: { category: "business_events", severity: "info" },
};

/** An event type's category and default severity; types outside the catalogue are business events. */
export function classify(eventType: string): { category: Category; severity: Severity } {
  return CATALOGUE[eventType] ?? { category: "business_events", severity: "info" };
}

// ---- roles ------------------------------------------------------------------------------------

/** Site and tenant roles, lowest first: each includes the rights of the ones before it. */
export const ROLES = ["viewer", "operator", "owner"] as const;
export type Role = (typeof ROLES)[number];

/** Whether `role` is below `than` (never when there was no role before). */
export const isLowerRole = (role: Role, than: Role | undefined) => than !== undefined && ROLES.indexOf(role) < ROLES.indexOf(than);

// ---- device presence --------------------------------------------------------------------------

export const LIVE_STATUSES = ["online", "offline", "error"] as const;
export type LiveStatus = (typeof LIVE_STATUSES)[number];

// ---- commands ---------------------------------------------------------------------------------

export const COMMAND_STATUSES = ["pending", "delivered", "acknowledged", "completed", "failed", "expired", "cancelled"] as const;
export type CommandStatus = (typeof COMMAND_STATUSES)[number];
export const OPEN_COMMAND_STATUSES: readonly CommandStatus[] = ["pending", "delivered", "acknowledged"];
export const isOpenCommandStatus = (status: string) => (OPEN_COMMAND_STATUSES as readonly string[]).includes(status);

export const DEFAULT_COMMAND_TTL_S = 3_600;
export const MAX_COMMAND_TTL_S = 48 * 3_600;
/** A long poll waits at most this long for a command to be queued. */
export const MAX_POLL_WAIT_S = 25;
/** Finished commands stay readable this long. */
export const COMMAND_RETENTION_MS = 30 * 86_400_000;

const COMMAND_ALIASES: Record<string, string> = { reboot: "restart", updateconfig: "update_config", "update-config": "update_config" };

/**
 * The command vocabulary is open (restart, shutdown, update_config, ping and whatever else a device
 * understands); names are lower-cased, `REBOOT` → `restart`, `UPDATE_CONFIG` → `update_config`.
 * Undefined when the name is not a plain identifier.
 */
export function normaliseCommandType(raw: string): string | undefined {
  const lower = raw.trim().toLowerCase();
  const name = COMMAND_ALIASES[lower] ?? lower;
  return /^[a-z][a-z0-9_]{0,63}$/.test(name) ? name : undefined;
}

// ---- jobs -------------------------------------------------------------------------------------

export const JOB_STATUSES = ["queued", "sent", "completed", "failed", "cancelled", "timeout"] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];
export const DEFAULT_JOB_DEADLINE_S = 15 * 60;

export type JobCounts = {
  total: number;
  succeeded: number;
  failed: number;
  cancelled: number;
  pending: number;
  skipped: number;
};

/** A job target its device's owner has not consented to: never sent, and not a failure of the job. */
export const SKIPPED_TARGET_STATUS = "skipped";

/**
 * The one way a job's targets are counted, by their command status: `completed` succeeded; `failed`
 * and `expired` failed; `cancelled` is counted apart (nobody ran it), as is `skipped` (the device's
 * owner did not allow it); open commands are pending.
 */
export function countTargets(statuses: Iterable<{ status: string; n?: number }>): JobCounts {
  const counts: JobCounts = { total: 0, succeeded: 0, failed: 0, cancelled: 0, pending: 0, skipped: 0 };
  for (const { status, n = 1 } of statuses) {
    counts.total += n;
    if (status === "completed") counts.succeeded += n;
    else if (status === "cancelled") counts.cancelled += n;
    else if (status === SKIPPED_TARGET_STATUS) counts.skipped += n;
    else if (isOpenCommandStatus(status)) counts.pending += n;
    else counts.failed += n;
  }
  return counts;
}

// ---- agents -----------------------------------------------------------------------------------

export const AGENT_STATES = ["idle", "downloading", "updating", "restarting", "health_check", "ready"] as const;
export type AgentState = (typeof AGENT_STATES)[number];

export const PUSH_ACTIONS = ["update", "update_config", "restart", "reboot", "health_check", "diagnostics", "backup", "ping", "clear_cache", "notify"] as const;
export type PushAction = (typeof PUSH_ACTIONS)[number];

export const DIAGNOSTIC_COMPONENTS = ["payment", "printer", "display", "network"] as const;
export type DiagnosticComponent = (typeof DIAGNOSTIC_COMPONENTS)[number];

export const SERIES_KINDS = ["metrics", "transactions", "errors"] as const;
export type SeriesKind = (typeof SERIES_KINDS)[number];
