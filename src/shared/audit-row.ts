import type { auditLogs } from "../db/schema";
import { classify, type Category, type Severity } from "./vocabulary";

/** One audit event as every producer describes it (Worker services and site hubs alike). */
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
  /** Who asked, for the client address and user agent; absent for work the system does itself. */
  request?: Request;
  /** When it happened, if not now (hubs record the moment of the transition, not of the write). */
  at?: string;
}

export type AuditRowValues = typeof auditLogs.$inferInsert;

/**
 * The one audit-row builder: fills category and severity from the catalogue so every producer's
 * rows are classified alike. Services insert the result with Drizzle; hubs hand it to their outbox.
 */
export function auditRow(input: AuditInput): AuditRowValues {
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
    ...(input.at ? { createdAt: input.at } : {}),
  };
}
