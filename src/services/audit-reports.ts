import { and, desc, gte, inArray, isNotNull, lt, sql, eq, asc, type SQL } from "drizzle-orm";
import type { Db } from "../env";
import { auditLogs, users } from "../db/schema";
import { csvLine } from "./audit-export";

export const REPORT_TYPES = ["summary", "security", "device_activity", "user_activity"] as const;
export type ReportType = (typeof REPORT_TYPES)[number];

/** How many actors, devices and addresses the "top" lists name. */
export const REPORT_TOP_N = 10;

/** Which events each report counts, on top of the period and categories the caller gives. */
const REPORT_SCOPE: Record<ReportType, { description: string; where?: SQL }> = {
  summary: { description: "every event of the period" },
  security: { description: "events of the `security_events` category (logins, refused access)", where: eq(auditLogs.category, "security_events") },
  device_activity: { description: "events that name a device", where: isNotNull(auditLogs.deviceId) },
  user_activity: { description: "events that name a user", where: isNotNull(auditLogs.userId) },
};

export const REPORT_TYPE_DESCRIPTIONS = Object.fromEntries(REPORT_TYPES.map((t) => [t, REPORT_SCOPE[t].description])) as Record<ReportType, string>;

export interface ReportQuery {
  reportType: ReportType;
  start: string;
  end: string;
  categories?: string[];
}

const eventCount = sql<number>`count(*)`;

/** The report's figures, each one SQL aggregate over the events in scope. */
export async function auditReport(db: Db, query: ReportQuery) {
  const inScope = and(
    gte(auditLogs.createdAt, query.start), lt(auditLogs.createdAt, query.end),
    query.categories?.length ? inArray(auditLogs.category, query.categories) : undefined,
    REPORT_SCOPE[query.reportType].where,
  );
  const countsBy = async (column: typeof auditLogs.category | typeof auditLogs.severity | typeof auditLogs.eventType) => {
    const rows = await db.select({ key: sql<string>`${column}`, events: eventCount }).from(auditLogs).where(inScope)
      .groupBy(column).orderBy(desc(eventCount), asc(column)).all();
    return Object.fromEntries(rows.map((r) => [r.key, r.events]));
  };
  const day = sql<string>`substr(${auditLogs.createdAt}, 1, 10)`;
  const [byCategory, bySeverity, byEventType, topActors, topDevices, topAddresses, daily] = await Promise.all([
    countsBy(auditLogs.category),
    countsBy(auditLogs.severity),
    countsBy(auditLogs.eventType),
    db.select({ user_id: sql<number>`${auditLogs.userId}`, email: users.email, events: eventCount }).from(auditLogs)
      .leftJoin(users, eq(users.id, auditLogs.userId))
      .where(and(inScope, isNotNull(auditLogs.userId)))
      .groupBy(auditLogs.userId).orderBy(desc(eventCount), asc(auditLogs.userId)).limit(REPORT_TOP_N).all(),
    db.select({ device_id: sql<string>`${auditLogs.deviceId}`, site_id: sql<string | null>`max(${auditLogs.siteId})`, events: eventCount }).from(auditLogs)
      .where(and(inScope, isNotNull(auditLogs.deviceId)))
      .groupBy(auditLogs.deviceId).orderBy(desc(eventCount), asc(auditLogs.deviceId)).limit(REPORT_TOP_N).all(),
    db.select({ ip_address: sql<string>`${auditLogs.ipAddress}`, events: eventCount }).from(auditLogs)
      .where(and(inScope, isNotNull(auditLogs.ipAddress)))
      .groupBy(auditLogs.ipAddress).orderBy(desc(eventCount), asc(auditLogs.ipAddress)).limit(REPORT_TOP_N).all(),
    db.select({ day, events: eventCount }).from(auditLogs).where(inScope).groupBy(day).orderBy(asc(day)).all(),
  ]);
  return {
    total_events: Object.values(byCategory).reduce((sum, n) => sum + n, 0),
    by_category: byCategory,
    by_severity: bySeverity,
    by_event_type: byEventType,
    top_actors: topActors.map((a) => ({ user_id: a.user_id, email: a.email ?? null, events: a.events })),
    top_devices: topDevices,
    top_ip_addresses: topAddresses,
    daily: daily,
  };
}

export type AuditReport = Awaited<ReturnType<typeof auditReport>>;

/** The report as CSV: one line per figure, `section,key,detail,events`. */
export function auditReportCsv(report: AuditReport): string {
  const lines = [csvLine(["section", "key", "detail", "events"]), csvLine(["total", "", "", report.total_events])];
  const counts = (section: string, record: Record<string, number>) => {
    for (const [key, n] of Object.entries(record)) lines.push(csvLine([section, key, "", n]));
  };
  counts("category", report.by_category);
  counts("severity", report.by_severity);
  counts("event_type", report.by_event_type);
  for (const a of report.top_actors) lines.push(csvLine(["top_actor", a.user_id, a.email, a.events]));
  for (const d of report.top_devices) lines.push(csvLine(["top_device", d.device_id, d.site_id, d.events]));
  for (const ip of report.top_ip_addresses) lines.push(csvLine(["top_ip_address", ip.ip_address, "", ip.events]));
  for (const d of report.daily) lines.push(csvLine(["day", d.day, "", d.events]));
  return lines.join("");
}
