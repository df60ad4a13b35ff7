import { and, desc, eq, gte, or, sql, type AnyColumn, type SQL } from "drizzle-orm";
import type { Db } from "../env";
import { auditLogs } from "../db/schema";
import { auditRow, type AuditInput } from "../shared/audit-row";
import type { Severity } from "../shared/vocabulary";
import { workerClock } from "../lib/clock";
import { toAuditEventView, type AuditEventView } from "../shared/audit-view";

/** Records one audit event; every feature goes through here so category and severity stay uniform. */
export async function recordAudit(db: Db, input: AuditInput) {
  return db.insert(auditLogs).values(auditRow(input)).returning().get();
}

export type AuditRow = typeof auditLogs.$inferSelect;

/** Custom events: metadata at most this many bytes as JSON (UTF-8), so one event stays small. */
export const CUSTOM_EVENT_METADATA_MAX_BYTES = 8 * 1024;
export const CUSTOM_EVENT_DESCRIPTION_MAX_CHARS = 1000;
/** A page of events stops before its body would pass this (but always holds at least one event). */
export const AUDIT_PAGE_MAX_BYTES = 1024 * 1024;
// Room for the page's own fields around the events: {"events":[…],"total":…,"next_offset":…}.
const PAGE_ENVELOPE_BYTES = 1024;
// What an event's field names and punctuation add to its values when serialised.
const EVENT_FRAME_BYTES = 256;

export const utf8Bytes = (text: string) => new TextEncoder().encode(text).byteLength;

export { toAuditEventView, type AuditEventView } from "../shared/audit-view";

export interface AuditQuery {
  limit: number;
  offset: number;
  category?: string;
  eventType?: string;
  severity?: string;
  since?: string;
  /** The row's user (who acted or whom the event is about). */
  userId?: number;
  /** `user_id` inside the event's metadata, as the events page names it (`metadata.user_id`). */
  metadataUserId?: number;
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
  if (query.metadataUserId !== undefined) filters.push(sql`json_extract(${auditLogs.eventMetadata}, '$.user_id') = ${query.metadataUserId}`);
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

const storedBytes = (column: AnyColumn) => sql`coalesce(length(CAST(${column} AS BLOB)), 4)`;

// An event's size as D1 stores it, close to its size as JSON: measured in the database, so events
// that cannot fit a page are never loaded only to be dropped (older rows can hold a megabyte).
const estimatedEventBytes = sql<number>`${sql.join([
  auditLogs.eventMetadata, auditLogs.description, auditLogs.eventType, auditLogs.category, auditLogs.severity, auditLogs.jobId,
  auditLogs.deviceId, auditLogs.siteId, auditLogs.ipAddress, auditLogs.userAgent, auditLogs.sessionId, auditLogs.createdAt,
  auditLogs.createdAt,
].map(storedBytes), sql` + `)} + ${EVENT_FRAME_BYTES}`;

/**
 * A page of events, newest first: at most `limit`, and no more than fit in AUDIT_PAGE_MAX_BYTES of
 * response body (at least one, however large). `truncated` says the byte bound cut the page short;
 * `nextOffset` is where the next page starts, or null after the last event.
 */
export async function listAuditEvents(db: Db, query: AuditQuery) {
  const where = auditFilters(query);
  const newestFirst = [desc(auditLogs.createdAt), desc(auditLogs.id)];
  const [candidates, [{ total }]] = await Promise.all([
    db.select({ bytes: estimatedEventBytes }).from(auditLogs).where(where).orderBy(...newestFirst)
      .limit(query.limit).offset(query.offset).all(),
    db.select({ total: sql<number>`count(*)` }).from(auditLogs).where(where).all(),
  ]);
  const budget = AUDIT_PAGE_MAX_BYTES - PAGE_ENVELOPE_BYTES;
  let fitting = 0;
  for (let used = 0; fitting < candidates.length; fitting++) {
    used += candidates[fitting].bytes;
    if (fitting > 0 && used > budget) break;
  }
  const rows = fitting
    ? await db.select().from(auditLogs).where(where).orderBy(...newestFirst).limit(fitting).offset(query.offset).all()
    : [];
  // The estimate leaves out JSON escaping; the exact size decides.
  const events: AuditEventView[] = [];
  for (let used = 0; events.length < rows.length; ) {
    const event = toAuditEventView(rows[events.length]);
    used += utf8Bytes(JSON.stringify(event)) + 1;
    if (events.length > 0 && used > budget) break;
    events.push(event);
  }
  const truncated = events.length < candidates.length;
  const next = query.offset + events.length;
  return { events, total, truncated, nextOffset: next < total ? next : null };
}

export async function auditStatistics(db: Db, sinceIso: string, visibleTo?: AuditQuery["visibleTo"]) {
  const scope = auditFilters({ limit: 0, offset: 0, visibleTo });
  const inWindow = and(scope, gte(auditLogs.createdAt, sinceIso));
  const group = (column: typeof auditLogs.eventType | typeof auditLogs.category | typeof auditLogs.severity) =>
    db.select({ key: column, count: sql<number>`count(*)` }).from(auditLogs).where(inWindow).groupBy(column).all();
  const countSince = (iso: string) =>
    db.select({ n: sql<number>`count(*)` }).from(auditLogs).where(and(scope, gte(auditLogs.createdAt, iso))).get();
  const now = workerClock.now();
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

