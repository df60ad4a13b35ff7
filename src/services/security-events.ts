import { auditRow } from "../shared/audit-row";
import { ExpiringMap } from "../lib/expiring-map";
import { workerClock } from "../lib/clock";
import { UNKNOWN_CLIENT } from "../shared/guard-contract";
import { clientAddressOf } from "./credential-throttle";

/**
 * `unauthorized_access` is rate-limited so that an attack cannot flood the trail: at most one row
 * per source (client address) per window, and at most UNAUTHORIZED_ACCESS_MAX_PER_WINDOW rows per
 * window service-wide. Both limits are checked by the insert itself, in D1, so they hold across
 * isolates; a per-isolate memory of the sources already recorded spares D1 the repeats.
 */
export const UNAUTHORIZED_ACCESS_WINDOW_MS = 10 * 60_000;
export const UNAUTHORIZED_ACCESS_MAX_PER_WINDOW = 100;

const recordedSources = new ExpiringMap<true>(10_000, () => workerClock.now());

export interface UnauthorizedAccess {
  /** What failed: a bearer token that is not ours, or a device key that failed verification. */
  reason: "forged_token" | "device_key_rejected";
  request: Request;
  deviceId?: string;
  siteId?: string;
}

/**
 * Records an `unauthorized_access` event unless this source already has one in the current window
 * or the window's service-wide cap is reached. Returns whether a row was written.
 */
export async function recordUnauthorizedAccess(d1: D1Database, incident: UnauthorizedAccess): Promise<boolean> {
  const source = clientAddressOf(incident.request.headers.get("CF-Connecting-IP")) ?? UNKNOWN_CLIENT;
  const now = workerClock.now();
  if (recordedSources.has(source)) return false;
  recordedSources.set(source, true, now + UNAUTHORIZED_ACCESS_WINDOW_MS);
  const windowStart = new Date(now - UNAUTHORIZED_ACCESS_WINDOW_MS).toISOString();
  const row = auditRow({
    eventType: "unauthorized_access",
    description: incident.reason === "forged_token"
      ? "A bearer token that this service did not sign was presented"
      : `A device key for ${incident.deviceId} failed verification`,
    siteId: incident.siteId,
    deviceId: incident.deviceId,
    metadata: {
      reason: incident.reason,
      source,
      path: new URL(incident.request.url).pathname,
      method: incident.request.method,
      window_s: UNAUTHORIZED_ACCESS_WINDOW_MS / 1000,
    },
    request: incident.request,
    at: new Date(now).toISOString(),
  });
  const result = await d1.prepare(`
    INSERT INTO audit_logs (event_type, category, severity, description, site_id, device_id, event_metadata, ip_address, user_agent, created_at)
    SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10
    WHERE NOT EXISTS (SELECT 1 FROM audit_logs WHERE event_type = ?1 AND created_at > ?11 AND json_extract(event_metadata, '$.source') = ?12)
      AND (SELECT count(*) FROM audit_logs WHERE event_type = ?1 AND created_at > ?11) < ?13`)
    .bind(
      row.eventType, row.category, row.severity, row.description ?? null, row.siteId ?? null, row.deviceId ?? null,
      JSON.stringify(row.eventMetadata), row.ipAddress ?? null, row.userAgent ?? null, row.createdAt ?? null,
      windowStart, source, UNAUTHORIZED_ACCESS_MAX_PER_WINDOW,
    )
    .run();
  return result.meta.changes > 0;
}
