import { and, desc, eq, sql } from "drizzle-orm";
import type { AuthDevice, Db, Env } from "../env";
import { deviceConfigHistory, errorLogs } from "../db/schema";
import { tooManyRequests } from "../lib/errors";
import { recordAudit } from "./audit";
import { ensureOwnDevice } from "./devices";
import { siteHub } from "../hub/client";
import { currentDate } from "../lib/clock";
import { normaliseTimestamp } from "../shared/time";
import type { ErrorSeverity } from "./analytics-errors";
import type { CommandRecord } from "../shared/hub-contract";

/**
 * What devices report about themselves besides presence and telemetry: log lines, audit events,
 * configuration changes, and their answers to pushes. Every call takes one of the device's call
 * tokens in its site's hub first, so these share the one per-device budget.
 */
export async function admitDeviceCall(env: Env, device: AuthDevice) {
  const wait = await siteHub(env, device.siteId).takeDeviceCallToken(device.deviceId);
  if (wait) throw tooManyRequests("Too many calls from this device", wait);
}

/**
 * A device call about the device `claimedDeviceId` names (in its body or path): refused unless that is
 * the calling device, then admitted against the device's call budget.
 */
export async function admitOwnDeviceCall(env: Env, device: AuthDevice, claimedDeviceId: string | undefined) {
  ensureOwnDevice(device.deviceId, claimedDeviceId);
  await admitDeviceCall(env, device);
}

// ---- logs -----------------------------------------------------------------------------------

/** Every device line is filed under this error-log category; the device's own category is in its context. */
export const DEVICE_LOG_CATEGORY = "device";

const LEVELS: Record<string, ErrorSeverity> = { info: "info", warning: "warning", warn: "warning", error: "error", critical: "critical" };

/** The original agents' levels: warn is warning; anything unknown (debug, trace) is kept as info. */
export const severityOfLevel = (level: string | undefined): ErrorSeverity => LEVELS[(level ?? "info").trim().toLowerCase()] ?? "info";

export interface DeviceLogInput {
  message: string;
  level?: string;
  category?: string;
  timestamp?: string;
  context?: Record<string, unknown>;
}

/** One line of the device's log into the error log, with its device and site (never folded with another device's). */
export async function recordDeviceLog(db: Db, device: AuthDevice, input: DeviceLogInput) {
  const at = currentDate().toISOString();
  const row = await db.insert(errorLogs).values({
    category: DEVICE_LOG_CATEGORY,
    severity: severityOfLevel(input.level),
    errorMessage: input.message,
    context: {
      ...input.context,
      device_id: device.deviceId,
      site_id: device.siteId,
      device_category: input.category ?? "device",
      device_timestamp: input.timestamp ? normaliseTimestamp(input.timestamp) : null,
    },
    lastSeenAt: at,
    createdAt: at,
  }).returning().get();
  return { id: row.id, created_at: row.createdAt, severity: row.severity };
}

const deviceOfLog = sql`json_extract(${errorLogs.context}, '$.device_id')`;

/** The device's own lines, newest first. */
export async function listDeviceLogs(db: Db, deviceId: string, limit: number) {
  const rows = await db.select().from(errorLogs)
    .where(and(sql`${deviceOfLog} = ${deviceId}`, eq(errorLogs.category, DEVICE_LOG_CATEGORY)))
    .orderBy(desc(errorLogs.createdAt), desc(errorLogs.id)).limit(limit).all();
  return rows.map((r) => {
    const context = (r.context ?? {}) as Record<string, unknown>;
    return {
      id: r.id,
      timestamp: r.createdAt,
      category: typeof context.device_category === "string" ? context.device_category : DEVICE_LOG_CATEGORY,
      severity: r.severity,
      error_code: null,
      error_message: r.errorMessage,
      resolved: r.resolutionStatus === "resolved",
    };
  });
}

// ---- audit ----------------------------------------------------------------------------------

/**
 * What a device may write into the audit trail: things that happened on the device. Anything an
 * operator or the service does (logins, commands queued, permissions) is recorded by the service
 * itself and cannot be claimed by a device.
 */
export const DEVICE_AUDIT_EVENT_TYPES = [
  "device_boot", "device_shutdown", "agent_started", "agent_stopped", "app_started", "app_stopped", "app_crashed",
  "config_applied", "config_rolled_back", "command_executed", "command_rejected", "push_received",
  "permission_requested", "local_login", "local_logout", "peripheral_connected", "peripheral_disconnected",
  "network_changed", "update_installed", "update_failed", "transaction_processed",
] as const;

export async function recordDeviceAuditEvent(db: Db, device: AuthDevice, input: { event_type: string; description: string; timestamp?: string; metadata?: Record<string, unknown> }, request?: Request) {
  const row = await recordAudit(db, {
    eventType: input.event_type,
    description: input.description,
    category: input.event_type === "transaction_processed" ? "business_events" : "device_management",
    siteId: device.siteId,
    deviceId: device.deviceId,
    metadata: { ...input.metadata, reported_by: "device", device_timestamp: input.timestamp ? normaliseTimestamp(input.timestamp) : null },
    request,
  });
  return { id: row.id, created_at: row.createdAt };
}

// ---- configuration history -------------------------------------------------------------------

export interface ConfigChangeInput {
  action: string;
  parameter_name: string;
  old_value?: unknown;
  new_value?: unknown;
  success?: boolean;
  change_reason?: string;
  timestamp?: string;
  performance_before?: Record<string, unknown>;
  performance_after?: Record<string, unknown>;
  was_rolled_back?: boolean;
  rollback_reason?: string;
  rollback_success?: boolean;
  rollback_performance?: Record<string, unknown>;
  rolled_back_at?: string;
}

export type ConfigChangeRow = typeof deviceConfigHistory.$inferSelect;

export async function recordConfigChange(db: Db, device: AuthDevice, input: ConfigChangeInput) {
  return db.insert(deviceConfigHistory).values({
    deviceId: device.deviceId,
    siteId: device.siteId,
    action: input.action,
    parameterName: input.parameter_name,
    oldValue: input.old_value ?? null,
    newValue: input.new_value ?? null,
    success: input.success ?? true,
    changeReason: input.change_reason ?? null,
    performanceBefore: input.performance_before ?? null,
    performanceAfter: input.performance_after ?? null,
    wasRolledBack: input.was_rolled_back ?? false,
    rollbackReason: input.rollback_reason ?? null,
    rollbackSuccess: input.rollback_success ?? null,
    rollbackPerformance: input.rollback_performance ?? null,
    rolledBackAt: (input.rolled_back_at && normaliseTimestamp(input.rolled_back_at)) || null,
    changedAt: (input.timestamp && normaliseTimestamp(input.timestamp)) || currentDate().toISOString(),
  }).returning().get();
}

export async function listConfigHistory(db: Db, deviceId: string, page: { limit: number; offset: number }) {
  const where = eq(deviceConfigHistory.deviceId, deviceId);
  const [rows, count] = await Promise.all([
    db.select().from(deviceConfigHistory).where(where).orderBy(desc(deviceConfigHistory.changedAt), desc(deviceConfigHistory.id)).limit(page.limit).offset(page.offset).all(),
    db.select({ n: sql<number>`count(*)` }).from(deviceConfigHistory).where(where).get(),
  ]);
  return { rows, total: count?.n ?? 0 };
}

export const toConfigChange = (r: ConfigChangeRow) => ({
  id: r.id, device_id: r.deviceId, site_id: r.siteId, action: r.action, parameter_name: r.parameterName,
  old_value: r.oldValue, new_value: r.newValue, success: r.success, change_reason: r.changeReason,
  performance_before: r.performanceBefore, performance_after: r.performanceAfter, was_rolled_back: r.wasRolledBack,
  rollback_reason: r.rollbackReason, rollback_success: r.rollbackSuccess, rollback_performance: r.rollbackPerformance,
  rolled_back_at: r.rolledBackAt, timestamp: r.changedAt, created_at: r.createdAt,
});

// ---- pushes a device polls for ---------------------------------------------------------------

/** A push reaches a device that polls for it as the `notify` command push send queued for it. */
const PUSH_COMMAND_TYPE = "notify";
const MAX_PENDING_PUSHES = 50;

export const toPendingPush = (c: CommandRecord) => ({
  message_id: c.command_id,
  provider: "command_poll",
  payload: c.payload,
  sent_at: c.created_at,
  status: "sent" as const,
});

/** The device's pushes not yet answered, oldest first (at most 50): the same records push send and its status read. */
export async function pendingPushes(env: Env, device: AuthDevice) {
  const hub = siteHub(env, device.siteId);
  const open = await Promise.all((["pending", "delivered", "acknowledged"] as const).map((status) =>
    hub.listCommands(device.deviceId, { status, limit: 500, offset: 0 })));
  return open.flatMap((page) => page.commands)
    .filter((c) => c.command_type === PUSH_COMMAND_TYPE)
    .sort((a, b) => a.created_at.localeCompare(b.created_at) || a.command_id.localeCompare(b.command_id))
    .slice(0, MAX_PENDING_PUSHES);
}

/**
 * The device says what became of a push: `delivered` completes its command, `failed` fails it. The
 * hub refuses a message of another device as unknown (404), and a different answer to one already
 * answered with 409.
 */
export async function ackPush(env: Env, device: AuthDevice, input: { message_id: string; status: "delivered" | "failed"; received_at?: string; error_message?: string }) {
  const receivedAt = input.received_at ? normaliseTimestamp(input.received_at) : currentDate().toISOString();
  return siteHub(env, device.siteId).reportCommand(device.deviceId, input.message_id, {
    status: input.status === "delivered" ? "completed" : "failed",
    result: { received_at: receivedAt, acknowledged_via: "push_ack" },
    errorMessage: input.status === "failed" ? input.error_message ?? "The device could not show the push" : null,
  });
}
