import { and, desc, eq, sql, type SQL } from "drizzle-orm";
import type { Db } from "../env";
import { errorLogs } from "../db/schema";
import { notFound } from "../lib/errors";
import { periodStart } from "../shared/rollups";
import { currentDate } from "../lib/clock";

export const ERROR_CATEGORIES = ["api", "database", "external_service", "validation", "frontend"] as const;
export const ERROR_SEVERITIES = ["critical", "error", "warning", "info"] as const;
export const RESOLUTION_STATUSES = ["open", "resolved", "ignored"] as const;
export type ErrorCategory = (typeof ERROR_CATEGORIES)[number];
export type ErrorSeverity = (typeof ERROR_SEVERITIES)[number];
export type ResolutionStatus = (typeof RESOLUTION_STATUSES)[number];

/** Identical reports within this long after a row was first seen are folded into it. */
export const ERROR_FOLD_WINDOW_MS = 5 * 60_000;
/** Reports one client (address + session) may send per minute before 429. */
export const ERROR_REPORTS_PER_MINUTE = 30;
const REPORT_WINDOW_MS = 60_000;

export interface ErrorReport {
  category: ErrorCategory;
  severity: ErrorSeverity;
  message: string;
  stackTrace?: string | null;
  context?: Record<string, unknown> | null;
  sessionId?: string | null;
  ipAddress?: string | null;
  userId?: number | null;
  requestId?: string | null;
}

export type ErrorRecordOutcome =
  | { recorded: true; id: number; occurrences: number; folded: boolean }
  | { recorded: false; retryAfterS: number };

/** The first line of a stack trace that names a frame (`at f (file:1:2)` or `f@file:1:2`), else its first line. */
export function firstStackFrame(stackTrace: string | null | undefined): string {
  const lines = (stackTrace ?? "").split("\n").map((l) => l.trim()).filter(Boolean);
  return lines.find((l) => /^at\s|@/.test(l)) ?? lines[0] ?? "";
}

async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** What makes two reports the same error: category, message and the first stack frame. */
export const errorFingerprint = (report: Pick<ErrorReport, "category" | "message" | "stackTrace">) =>
  sha256Hex(`${report.category}\n${report.message}\n${firstStackFrame(report.stackTrace)}`);

/** Whom the rate limit counts by: the client's address and browser session, hashed (the window rows keep no address). */
export const reportClientKey = (ipAddress: string | null | undefined, sessionId: string | null | undefined) =>
  sha256Hex(`${ipAddress ?? "-"}|${sessionId ?? ""}`);

/** Clients this isolate has already seen over their limit, until their window ends. */
const blockedUntil = new Map<string, number>();
const MAX_BLOCKED = 10_000;

/**
 * Records one error report: folded into the newest row with the same fingerprint first seen within
 * the last 5 minutes (and not resolved since), otherwise a new row; and counted in the hourly
 * error rollup. `rateLimited` (the unauthenticated endpoint): the client's reports (address and
 * session) are counted per minute first, and a client over ERROR_REPORTS_PER_MINUTE gets
 * `recorded: false` and nothing else is written. All of it is one atomic D1 batch, so concurrent identical reports still make one row.
 */
export async function recordError(d1: D1Database, report: ErrorReport, now: number, { rateLimited = false } = {}): Promise<ErrorRecordOutcome> {
  const windowStart = Math.floor(now / REPORT_WINDOW_MS) * REPORT_WINDOW_MS;
  const retryAfterS = Math.max(1, Math.ceil((windowStart + REPORT_WINDOW_MS - now) / 1000));
  const clientKey = rateLimited ? await reportClientKey(report.ipAddress, report.sessionId) : undefined;
  if (clientKey && (blockedUntil.get(clientKey) ?? 0) > now) return { recorded: false, retryAfterS };

  const fingerprint = await errorFingerprint(report);
  const at = new Date(now).toISOString();
  const foldFrom = new Date(now - ERROR_FOLD_WINDOW_MS).toISOString();
  const windowIso = new Date(windowStart).toISOString();
  // Every write below happens only while the client is within its limit (always, without a client).
  const allowed = clientKey
    ? { sql: `(SELECT reports FROM error_report_windows WHERE window_start = ? AND client_key = ?) <= ${ERROR_REPORTS_PER_MINUTE}`, params: [windowIso, clientKey] }
    : { sql: "true", params: [] };
  const foldable = "fingerprint = ? AND created_at >= ? AND resolution_status != 'resolved'";
  const statements: D1PreparedStatement[] = [];
  if (clientKey) {
    statements.push(d1.prepare(
      `INSERT INTO error_report_windows (window_start, client_key, reports) VALUES (?, ?, 1)
       ON CONFLICT (window_start, client_key) DO UPDATE SET reports = reports + 1 RETURNING reports`,
    ).bind(windowIso, clientKey));
  }
  statements.push(d1.prepare(
    `UPDATE error_logs SET occurrences = occurrences + 1, last_seen_at = ?
     WHERE id = (SELECT id FROM error_logs WHERE ${foldable} ORDER BY created_at DESC, id DESC LIMIT 1) AND ${allowed.sql}
     RETURNING id, occurrences`,
  ).bind(at, fingerprint, foldFrom, ...allowed.params));
  statements.push(d1.prepare(
    `INSERT INTO error_logs (fingerprint, created_at, last_seen_at, category, severity, error_message, stack_trace, occurrences,
                             context, session_id, ip_address, user_id, request_id)
     SELECT ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?
     WHERE NOT EXISTS (SELECT 1 FROM error_logs WHERE ${foldable}) AND ${allowed.sql}
     RETURNING id, occurrences`,
  ).bind(
    fingerprint, at, at, report.category, report.severity, report.message, report.stackTrace ?? null,
    report.context ? JSON.stringify(report.context) : null, report.sessionId ?? null, report.ipAddress ?? null,
    report.userId ?? null, report.requestId ?? null,
    fingerprint, foldFrom, ...allowed.params,
  ));
  statements.push(d1.prepare(
    `INSERT INTO error_rollups (bucket_start, category, severity, count)
     SELECT ?, ?, ?, 1 WHERE ${allowed.sql}
     ON CONFLICT (bucket_start, category, severity) DO UPDATE SET count = count + 1`,
  ).bind(new Date(periodStart("hour", now)).toISOString(), report.category, report.severity, ...allowed.params));

  const results = await d1.batch<{ id?: number; occurrences?: number; reports?: number }>(statements);
  const counted = clientKey ? results.shift() : undefined;
  if (clientKey && (counted?.results[0]?.reports ?? 0) > ERROR_REPORTS_PER_MINUTE) {
    if (blockedUntil.size >= MAX_BLOCKED) blockedUntil.clear();
    blockedUntil.set(clientKey, windowStart + REPORT_WINDOW_MS);
    return { recorded: false, retryAfterS };
  }
  const [folded, inserted] = results;
  const row = folded?.results[0] ?? inserted?.results[0];
  if (row?.id === undefined) throw new Error("error report: neither folded nor inserted");
  return { recorded: true, id: row.id, occurrences: row.occurrences ?? 1, folded: Boolean(folded?.results.length) };
}

export type ErrorRow = typeof errorLogs.$inferSelect;

export async function listErrors(db: Db, q: { status?: ResolutionStatus; category?: ErrorCategory; severity?: ErrorSeverity; limit: number; offset: number }) {
  const filters: SQL[] = [];
  if (q.status) filters.push(eq(errorLogs.resolutionStatus, q.status));
  if (q.category) filters.push(eq(errorLogs.category, q.category));
  if (q.severity) filters.push(eq(errorLogs.severity, q.severity));
  const where = filters.length ? and(...filters) : undefined;
  const [rows, [{ total }]] = await Promise.all([
    db.select().from(errorLogs).where(where).orderBy(desc(errorLogs.createdAt), desc(errorLogs.id)).limit(q.limit).offset(q.offset).all(),
    db.select({ total: sql<number>`count(*)` }).from(errorLogs).where(where).all(),
  ]);
  return { rows, total };
}

/** An administrator marks an error resolved, ignored, or open again. */
export async function setErrorResolution(db: Db, id: number, status: ResolutionStatus, userId: number) {
  const closed = status !== "open";
  const row = await db.update(errorLogs).set({
    resolutionStatus: status,
    resolvedAt: closed ? currentDate().toISOString() : null,
    resolvedBy: closed ? userId : null,
  }).where(eq(errorLogs.id, id)).returning().get();
  if (!row) throw notFound(`Error with ID '${id}' not found`);
  return row;
}
