import { and, desc, eq, gte, or, sql, type SQL } from "drizzle-orm";
import type { Db } from "../env";
import { auditLogs } from "../db/schema";
import { auditRow, type AuditInput } from "../shared/audit-row";
import type { Severity } from "../shared/vocabulary";

/** Records one audit event; every feature goes through here so category and severity stay uniform. */
export async function recordAudit(db: Db, input: AuditInput) {
  return db.insert(auditLogs).values(auditRow(input)).returning().get();
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

