import { and, asc, eq, gt, gte, inArray, lt, or, type SQL } from "drizzle-orm";
import type { Db } from "../env";
import { auditLogs } from "../db/schema";
import type { AuditRow } from "./audit";

/**
 * The fields an exported event carries, in column order: the one list the JSON, NDJSON and CSV
 * writers (and the archives) read, so a new audit column is exported by adding one line here.
 */
export const AUDIT_EXPORT_FIELDS = [
  { name: "id", value: (r: AuditRow) => r.id },
  { name: "created_at", value: (r: AuditRow) => r.createdAt },
  { name: "event_type", value: (r: AuditRow) => r.eventType },
  { name: "category", value: (r: AuditRow) => r.category },
  { name: "severity", value: (r: AuditRow) => r.severity },
  { name: "description", value: (r: AuditRow) => r.description },
  { name: "user_id", value: (r: AuditRow) => r.userId },
  { name: "site_id", value: (r: AuditRow) => r.siteId },
  { name: "device_id", value: (r: AuditRow) => r.deviceId },
  { name: "job_id", value: (r: AuditRow) => r.jobId },
  { name: "ip_address", value: (r: AuditRow) => r.ipAddress },
  { name: "user_agent", value: (r: AuditRow) => r.userAgent },
  { name: "session_id", value: (r: AuditRow) => r.sessionId },
  { name: "event_metadata", value: (r: AuditRow) => (r.eventMetadata ?? {}) as Record<string, unknown> },
  // The hash chain's links, so an auditor can verify an exported segment offline (docs/audit.md).
  { name: "prev_hash", value: (r: AuditRow) => r.prevHash },
  { name: "hash", value: (r: AuditRow) => r.hash },
] as const;

/** The one field left out when the caller asks for no metadata. */
export const METADATA_FIELD = "event_metadata";

export type ExportFormat = "json" | "ndjson" | "csv";

/** Rows read from D1 per query while streaming: the export holds one page in memory, never the period. */
export const EXPORT_PAGE_ROWS = 500;

export interface ExportQuery {
  /** Inclusive, ISO 8601 (UTC). */
  start: string;
  /** Exclusive, ISO 8601 (UTC). */
  end: string;
  categories?: string[];
  includeMetadata: boolean;
}

const fieldsFor = (includeMetadata: boolean) =>
  AUDIT_EXPORT_FIELDS.filter((f) => includeMetadata || f.name !== METADATA_FIELD);

/** One exported event as an object of the exported fields. */
export function exportedEvent(row: AuditRow, includeMetadata = true): Record<string, unknown> {
  return Object.fromEntries(fieldsFor(includeMetadata).map((f) => [f.name, f.value(row)]));
}

// A spreadsheet reads a cell starting with one of these as a formula (tab and CR too, because some
// programs strip them and then see the next character).
const FORMULA_LEADS = new Set(["=", "+", "-", "@", "\t", "\r"]);

/**
 * One CSV cell (RFC 4180 quoting). Text that a spreadsheet would run as a formula is prefixed with
 * an apostrophe, which shows the text as typed and runs nothing.
 */
export function csvCell(value: unknown): string {
  if (value === null || value === undefined) return "";
  let text = typeof value === "object" ? JSON.stringify(value) : String(value);
  if (typeof value === "string" && text.length > 0 && FORMULA_LEADS.has(text[0])) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

export const csvLine = (cells: unknown[]) => `${cells.map(csvCell).join(",")}\r\n`;

/** Events of the period, oldest first, in pages: each page resumes after the last (created_at, id) read. */
export async function* auditRowsInPeriod(db: Db, query: Omit<ExportQuery, "includeMetadata">, extra?: SQL): AsyncGenerator<AuditRow[]> {
  let after: { at: string; id: number } | undefined;
  for (;;) {
    const resume = after
      ? or(gt(auditLogs.createdAt, after.at), and(eq(auditLogs.createdAt, after.at), gt(auditLogs.id, after.id)))
      : undefined;
    const rows = await db.select().from(auditLogs)
      .where(and(
        gte(auditLogs.createdAt, query.start), lt(auditLogs.createdAt, query.end),
        query.categories?.length ? inArray(auditLogs.category, query.categories) : undefined,
        extra, resume,
      ))
      .orderBy(asc(auditLogs.createdAt), asc(auditLogs.id))
      .limit(EXPORT_PAGE_ROWS)
      .all();
    if (rows.length) yield rows;
    if (rows.length < EXPORT_PAGE_ROWS) return;
    const last = rows[rows.length - 1];
    after = { at: last.createdAt, id: last.id };
  }
}

/** The text of the export, piece by piece: a JSON array, one JSON object per line, or CSV with a header. */
export async function* exportText(db: Db, format: ExportFormat, query: ExportQuery): AsyncGenerator<string> {
  const fields = fieldsFor(query.includeMetadata);
  if (format === "csv") yield csvLine(fields.map((f) => f.name));
  if (format === "json") yield "[";
  let first = true;
  for await (const rows of auditRowsInPeriod(db, query)) {
    let chunk = "";
    for (const row of rows) {
      if (format === "csv") {
        chunk += csvLine(fields.map((f) => f.value(row)));
      } else {
        const json = JSON.stringify(exportedEvent(row, query.includeMetadata));
        chunk += format === "ndjson" ? `${json}\n` : `${first ? "\n" : ",\n"}${json}`;
      }
      first = false;
    }
    yield chunk;
  }
  if (format === "json") yield first ? "]\n" : "\n]\n";
}

/** Turns pieces of text into a byte stream that reads the next piece only when the reader wants more. */
export function textStream(pieces: AsyncGenerator<string>): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await pieces.next();
      if (next.done) controller.close();
      else controller.enqueue(encoder.encode(next.value));
    },
    async cancel() {
      await pieces.return(undefined);
    },
  });
}

export const gzip = (stream: ReadableStream<Uint8Array>) => stream.pipeThrough(new CompressionStream("gzip"));

export const EXPORT_MEDIA_TYPES: Record<ExportFormat, string> = {
  json: "application/json",
  ndjson: "application/x-ndjson",
  csv: "text/csv; charset=utf-8",
};

/** `audit-export-20260101T000000Z-20260201T000000Z.csv.gz`: the period in the name, safe in any file system. */
export function exportFileName(format: ExportFormat, start: string, end: string, compressed: boolean) {
  const stamp = (iso: string) => iso.replace(/\.\d+Z$/, "Z").replace(/[-:]/g, "");
  return `audit-export-${stamp(start)}-${stamp(end)}.${format}${compressed ? ".gz" : ""}`;
}

/** The streamed export as a response body and its headers. */
export function auditExport(db: Db, format: ExportFormat, query: ExportQuery, compress: boolean) {
  const text = textStream(exportText(db, format, query));
  return {
    body: compress ? gzip(text) : text,
    headers: {
      "Content-Type": compress ? "application/gzip" : EXPORT_MEDIA_TYPES[format],
      "Content-Disposition": `attachment; filename="${exportFileName(format, query.start, query.end, compress)}"`,
      "Cache-Control": "no-store",
    },
  };
}
