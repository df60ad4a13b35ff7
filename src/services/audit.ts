import { and, desc, eq, gte, or, sql, type SQL } from "drizzle-orm";
import type { Db } from "../env";
import { auditLogs } from "../db/schema";

export type Severity = "info" | "warning" | "error" | "critical";

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

/** The specification's event table: each known type's category and default severity. */
const CATALOGUE: Record<string, { category: Category; severity: Severity }> = {
  login_attempt: { category: "security_events", severity: "info" },
  login_success: { category: "security_events", severity: "info" },
  login_failed: { category: "security_events", severity: "warning" },
  unauthorized_access: { category: "security_events", severity: "critical" },
  api_access: { category: "security_events", severity: "info" },
  permission_denied: { category: "security_events", severity: "warning" },
  user_created: { category: "user_actions", severity: "info" },
  user_deleted: { category: "user_actions", severity: "warning" },
  site_created: { category: "site_management", severity: "info" },
  site_member_added: { category: "site_management", severity: "info" },
  site_member_removed: { category: "site_management", severity: "info" },
  tenant_created: { category: "site_management", severity: "info" },
  tenant_member_added: { category: "site_management", severity: "info" },
  tenant_member_removed: { category: "site_management", severity: "info" },
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
  command_queued: { category: "device_management", severity: "info" },
  command_delivered: { category: "device_management", severity: "info" },
  command_lease_expired: { category: "device_management", severity: "info" },
  command_acknowledged: { category: "device_management", severity: "info" },
  command_completed: { category: "device_management", severity: "info" },
  command_failed: { category: "device_management", severity: "warning" },
  command_expired: { category: "device_management", severity: "warning" },
  command_cancelled: { category: "device_management", severity: "warning" },
  job_created: { category: "job_management", severity: "info" },
  job_started: { category: "job_management", severity: "info" },
  job_completed: { category: "job_management", severity: "info" },
  job_failed: { category: "job_management", severity: "error" },
  job_cancelled: { category: "job_management", severity: "warning" },
  job_timeout: { category: "job_management", severity: "error" },
  system_startup: { category: "system_events", severity: "info" },
  system_shutdown: { category: "system_events", severity: "info" },
  admin_action: { category: "user_actions", severity: "info" },
  config_updated: { category: "system_events", severity: "info" },
  transaction_processed: { category: "business_events", severity: "info" },
};

export function classify(eventType: string): { category: Category; severity: Severity } {
  return CATALOGUE[eventType] ?? { category: "business_events", severity: "info" };
}

export interface AuditInput {
  eventType: string;
  description?: string;
  category?: Category;
  severity?: Severity;
  userId?: number | null;
  siteId?: string | null;
  deviceId?: string | null;
  jobId?: string | null;
  metadata?: Record<string, unknown>;
  sessionId?: string | null;
  request?: Request;
}

export function auditValues(input: AuditInput): typeof auditLogs.$inferInsert {
  const defaults = classify(input.eventType);
  return {
    eventType: input.eventType,
    category: input.category ?? defaults.category,
    severity: input.severity ?? defaults.severity,
    description: input.description ?? null,
    userId: input.userId ?? null,
    siteId: input.siteId ?? null,
    deviceId: input.deviceId ?? null,
    jobId: input.jobId ?? null,
    eventMetadata: input.metadata ?? {},
    ipAddress: input.request?.headers.get("CF-Connecting-IP") ?? null,
    userAgent: input.request?.headers.get("User-Agent") ?? null,
    sessionId: input.sessionId ?? null,
  };
}

/** Records one audit event; every feature goes through here so category and severity stay uniform. */
export async function recordAudit(db: Db, input: AuditInput) {
  return db.insert(auditLogs).values(auditValues(input)).returning().get();
}

export type AuditRow = typeof auditLogs.$inferSelect;

export interface AuditQuery {
  limit: number;
  offset: number;
  category?: string;
  eventType?: string;
  severity?: string;
  since?: string;
  userId?: number;
  /** undefined: every event (administrators); otherwise events of these sites and the user's own. */
  visibleTo?: { siteIds: string[]; userId: number };
}

function auditFilters(query: AuditQuery): SQL | undefined {
  const filters: (SQL | undefined)[] = [];
  if (query.category) filters.push(eq(auditLogs.category, query.category));
  if (query.eventType) filters.push(eq(auditLogs.eventType, query.eventType));
  if (query.severity) filters.push(eq(auditLogs.severity, query.severity as Severity));
  if (query.since) filters.push(gte(auditLogs.createdAt, query.since));
  if (query.userId !== undefined) filters.push(eq(auditLogs.userId, query.userId));
  if (query.visibleTo) {
    const { siteIds, userId } = query.visibleTo;
    // The site ids are bound as one JSON parameter: D1 allows at most 100 per statement, and a
    // tenant-wide role can easily reach more sites than that.
    filters.push(siteIds.length
      ? or(sql`${auditLogs.siteId} IN (SELECT value FROM json_each(${JSON.stringify(siteIds)}))`, eq(auditLogs.userId, userId))
      : eq(auditLogs.userId, userId));
  }
  return filters.length ? and(...filters) : undefined;
}

export async function listAuditEvents(db: Db, query: AuditQuery) {
  const where = auditFilters(query);
  const [rows, [{ total }]] = await Promise.all([
    db.select().from(auditLogs).where(where).orderBy(desc(auditLogs.createdAt), desc(auditLogs.id))
      .limit(query.limit).offset(query.offset).all(),
    db.select({ total: sql<number>`count(*)` }).from(auditLogs).where(where).all(),
  ]);
  return { rows, total };
}

export async function auditStatistics(db: Db, sinceIso: string, visibleTo?: AuditQuery["visibleTo"]) {
  const scope = auditFilters({ limit: 0, offset: 0, visibleTo });
  const inWindow = and(scope, gte(auditLogs.createdAt, sinceIso));
  const group = (column: typeof auditLogs.eventType | typeof auditLogs.category | typeof auditLogs.severity) =>
    db.select({ key: column, count: sql<number>`count(*)` }).from(auditLogs).where(inWindow).groupBy(column).all();
  const countSince = (iso: string) =>
    db.select({ n: sql<number>`count(*)` }).from(auditLogs).where(and(scope, gte(auditLogs.createdAt, iso))).get();
  const now = Date.now();
  const [byType, byCategory, bySeverity, lastHour, lastDay, lastWeek] = await Promise.all([
    group(auditLogs.eventType),
    group(auditLogs.category),
    group(auditLogs.severity),
    countSince(new Date(now - 3_600_000).toISOString()),
    countSince(new Date(now - 86_400_000).toISOString()),
    countSince(new Date(now - 604_800_000).toISOString()),
  ]);
  const toObject = (rows: { key: string; count: number }[]) => Object.fromEntries(rows.map((r) => [r.key, r.count]));
  const eventsByType = toObject(byType);
  return {
    total_events: byType.reduce((sum, r) => sum + r.count, 0),
    events_by_type: eventsByType,
    events_by_category: toObject(byCategory),
    events_by_severity: toObject(bySeverity),
    api_access_count: eventsByType.api_access ?? 0,
    recent_activity: { last_hour: lastHour?.n ?? 0, last_24_hours: lastDay?.n ?? 0, last_week: lastWeek?.n ?? 0 },
  };
}

