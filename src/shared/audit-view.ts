import type { auditLogs } from "../db/schema";
import type { ChainedFields } from "./audit-chain";

export type AuditRow = typeof auditLogs.$inferSelect;

/** An audit event as the API, the live audit stream and exports show it. */
export const toAuditEventView = (r: AuditRow) => ({
  id: r.id,
  event_type: r.eventType,
  category: r.category,
  severity: r.severity,
  description: r.description,
  user_id: r.userId,
  job_id: r.jobId,
  device_id: r.deviceId,
  site_id: r.siteId,
  event_metadata: (r.eventMetadata ?? {}) as Record<string, unknown>,
  ip_address: r.ipAddress,
  user_agent: r.userAgent,
  session_id: r.sessionId,
  created_at: r.createdAt,
  timestamp: r.createdAt,
  prev_hash: r.prevHash,
  hash: r.hash,
});

export type AuditEventView = ReturnType<typeof toAuditEventView>;

/** The fields of a row its chain hash covers. */
export const chainedFieldsOf = (r: AuditRow): ChainedFields => {
  const { timestamp: _timestamp, prev_hash: _prev, hash: _hash, ...fields } = toAuditEventView(r);
  return fields;
};
