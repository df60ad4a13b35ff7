import { z } from "@hono/zod-openapi";
import { CATEGORIES, SEVERITIES } from "./vocabulary";

/**
 * What the Worker and the AuditStream Durable Object agree on: the one instance's name, the
 * subscription filter the Worker passes in the subscribe URL, and the reply of a nudge.
 */
export const AUDIT_STREAM_NAME = "audit";

/** A subscription: which events it wants, and the id after which it resumes (Last-Event-ID). */
export const AuditStreamFilterSchema = z.object({
  since: z.coerce.number().int().min(0).optional(),
  category: z.enum(CATEGORIES).optional(),
  severity: z.enum(SEVERITIES).optional(),
  event_type: z.string().max(64).optional(),
  site_id: z.string().max(64).optional(),
  /** Who subscribed, so that a revocation finds their subscriptions (not matched against events). */
  user_id: z.coerce.number().int().optional(),
});
export type AuditStreamFilter = z.infer<typeof AuditStreamFilterSchema>;

/** The fields a filter is matched against. */
export interface FilteredEvent {
  category: string;
  severity: string;
  event_type: string;
  site_id: string | null;
}

export const matchesFilter = (filter: AuditStreamFilter, event: FilteredEvent) =>
  (filter.category === undefined || filter.category === event.category) &&
  (filter.severity === undefined || filter.severity === event.severity) &&
  (filter.event_type === undefined || filter.event_type === event.event_type) &&
  (filter.site_id === undefined || filter.site_id === event.site_id);

/** The subscribe request's URL (the object's `fetch` serves nothing else). */
export function subscribeUrl(filter: AuditStreamFilter): string {
  const url = new URL("https://audit-stream.internal/subscribe");
  for (const [key, value] of Object.entries(filter)) if (value !== undefined) url.searchParams.set(key, String(value));
  return url.toString();
}

/** A nudge by plain request, for callers without the object's RPC type (the site hubs). */
export const NUDGE_URL = "https://audit-stream.internal/nudge";

export const NudgeReplySchema = z.object({
  /** Every audit row up to this id is sealed and published. */
  sealed_through: z.number().int(),
});
export type NudgeReply = z.infer<typeof NudgeReplySchema>;

/** The sites a user's open audit subscriptions watch: `unscoped` when one of them names no site. */
export const WatchedSitesSchema = z.object({ unscoped: z.boolean(), site_ids: z.array(z.string()) });
export type WatchedSites = z.infer<typeof WatchedSitesSchema>;

/** Keep-alive comment interval on an open audit stream. */
export const AUDIT_STREAM_KEEPALIVE_MS = 20_000;
