import { z } from "@hono/zod-openapi";

/**
 * Alert rules as the AuditStream object evaluates them, the webhook payload it sends, and how it
 * signs and retries. The Worker stores rules in D1 (`audit_alert_rules`); the object reads them.
 */

/** At most this many tries per notification, spaced by jittered exponential backoff (about an hour in all). */
export const DELIVERY_MAX_TRIES = 6;
/** The wait after the first failed try; each next wait doubles (2, 4, 8, 16, 32 minutes: ~62 minutes). */
export const DELIVERY_RETRY_BASE_MS = 2 * 60_000;
/** Each wait is scaled by a random factor in [1 - JITTER, 1 + JITTER], so failing receivers are not hit in lockstep. */
export const DELIVERY_RETRY_JITTER = 0.25;
/** One try waits this long for the receiver's answer. */
export const DELIVERY_TIMEOUT_MS = 10_000;
/** Events included in a notification as a sample of what crossed the threshold. */
export const ALERT_SAMPLE_EVENTS = 10;

export const retryDelayMs = (failedTries: number, baseMs: number, random: number) =>
  Math.round(baseMs * 2 ** (failedTries - 1) * (1 - DELIVERY_RETRY_JITTER + 2 * DELIVERY_RETRY_JITTER * random));

const hex = (bytes: ArrayBuffer) => [...new Uint8Array(bytes)].map((b) => b.toString(16).padStart(2, "0")).join("");

/** `X-Fleet-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>` */
export async function webhookSignature(secret: string, unixSeconds: number, body: string): Promise<string> {
  const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`${unixSeconds}.${body}`));
  return `t=${unixSeconds},v1=${hex(mac)}`;
}

export const AlertRuleRowSchema = z.object({
  id: z.string(),
  alert_name: z.string(),
  event_types: z.array(z.string()),
  threshold: z.number().int(),
  time_window_s: z.number().int(),
  site_id: z.string().nullable(),
  severities: z.array(z.string()).nullable(),
  cooldown_s: z.number().int(),
  webhook_url: z.string().nullable(),
  webhook_secret: z.string().nullable(),
  email: z.string().nullable(),
});
export type AlertRuleRow = z.infer<typeof AlertRuleRowSchema>;

export const IntegrationRowSchema = z.object({
  id: z.string(),
  type: z.enum(["syslog", "webhook"]),
  destination: z.string(),
  format: z.enum(["rfc5424", "json"]),
  severities: z.array(z.string()).nullable(),
  categories: z.array(z.string()).nullable(),
  webhook_secret: z.string().nullable(),
});
export type IntegrationRow = z.infer<typeof IntegrationRowSchema>;

/** Whether an event passes an integration's filter (absent lists let everything through). */
export const passesIntegrationFilter = (integration: Pick<IntegrationRow, "severities" | "categories">, event: { severity: string; category: string }) =>
  (!integration.severities || integration.severities.includes(event.severity)) &&
  (!integration.categories || integration.categories.includes(event.category));
