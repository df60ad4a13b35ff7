import {
  ALERT_SAMPLE_EVENTS, AlertRuleRowSchema, DELIVERY_MAX_TRIES, IntegrationRowSchema, passesIntegrationFilter, retryDelayMs,
  type AlertRuleRow, type IntegrationRow,
} from "../src/shared/alert-contract";
import type { OutboundPolicy } from "../src/shared/outbound-address";
import { sendSyslog, sendWebhook, syslogPayload, type SendResult } from "../src/shared/audit-forwarding";
import { openSecret } from "../src/shared/secret-box";
import type { AuditEventView } from "../src/shared/audit-view";

/** Notifications waiting for their (next) try, in the AuditStream object's own storage. */
export const ALERT_OUTBOX_SCHEMA = `
  CREATE TABLE IF NOT EXISTS alert_outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    rule_id TEXT NOT NULL,
    firing_id TEXT NOT NULL,
    channel TEXT NOT NULL,
    target TEXT NOT NULL,
    secret TEXT,
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0,
    next_at INTEGER NOT NULL
  );
`;

/** Rules are re-read from D1 at least this often, besides when the Worker says they changed. */
const RULES_MAX_AGE_MS = 60_000;
/** Tries made per wake-up; the rest wait for the next one. */
const TRIES_PER_WAKE = 20;

export interface DeliverySettings {
  policy: OutboundPolicy;
  retryBaseMs: number;
  /** The root secret that webhook secrets are sealed under (JWT_SECRET). */
  rootSecret: string;
  email?: SendEmail;
  emailFrom?: string;
}

interface Window {
  /** Event times (ms) inside the rule's window, oldest first, with the events themselves. */
  events: { at: number; view: AuditEventView }[];
  above: boolean;
  lastFiredAt: number;
}

const parseJsonArray = (text: unknown): string[] | null => {
  if (typeof text !== "string") return null;
  try {
    const value: unknown = JSON.parse(text);
    return Array.isArray(value) ? value.map(String) : null;
  } catch {
    return null;
  }
};

/**
 * Threshold rules over the published events. Each rule keeps a sliding window of its matching
 * events (by their `created_at`); when the count reaches the threshold from below, the rule fires
 * once, then re-arms only after the count fell below the threshold again, and never fires twice
 * within its cooldown. Windows live in memory: after the object is evicted a window starts empty.
 */
export class AlertEvaluator {
  private rules: AlertRuleRow[] | undefined;
  private integrations: IntegrationRow[] = [];
  private loadedAt = 0;
  private readonly windows = new Map<string, Window>();

  constructor(private readonly sql: SqlStorage, private readonly d1: () => D1Database, private readonly now: () => number) {
    this.sql.exec(ALERT_OUTBOX_SCHEMA);
  }

  /** Rules or integrations changed in D1: re-read them, and drop queued notifications of those that are gone. */
  async rulesChanged() {
    this.rules = undefined;
    await this.load();
    const ids = [...this.rules!.map((r) => r.id), ...this.integrations.map((i) => i.id)];
    this.sql.exec(`DELETE FROM alert_outbox WHERE rule_id NOT IN (SELECT value FROM json_each(?))`, JSON.stringify(ids));
    for (const id of this.windows.keys()) if (!ids.includes(id)) this.windows.delete(id);
  }

  private async load() {
    if (this.rules && this.now() - this.loadedAt < RULES_MAX_AGE_MS) return;
    const { results } = await this.d1().prepare(
      `SELECT id, alert_name, event_types, threshold, time_window_s, site_id, severities, cooldown_s, webhook_url, webhook_secret, email
       FROM audit_alert_rules WHERE enabled = 1`).all<Record<string, unknown>>();
    this.rules = results.map((r) => AlertRuleRowSchema.parse({ ...r, event_types: parseJsonArray(r.event_types) ?? [], severities: parseJsonArray(r.severities) }));
    const integrations = await this.d1().prepare(
      "SELECT id, type, destination, format, severities, categories, webhook_secret FROM audit_integrations").all<Record<string, unknown>>();
    this.integrations = integrations.results.map((r) => IntegrationRowSchema.parse({
      ...r, severities: parseJsonArray(r.severities), categories: parseJsonArray(r.categories),
    }));
    this.loadedAt = this.now();
  }

  /** Feeds published events to every rule; queues the notifications of the rules that fire. */
  async observe(views: AuditEventView[]): Promise<number> {
    await this.load();
    let queued = 0;
    for (const rule of this.rules ?? []) {
      for (const view of views) {
        if (!rule.event_types.includes(view.event_type)) continue;
        if (rule.site_id !== null && rule.site_id !== view.site_id) continue;
        if (rule.severities && !rule.severities.includes(view.severity)) continue;
        queued += this.count(rule, view);
      }
    }
    return queued;
  }

  /** Queues the published events each integration's filter lets through, one message per integration and batch. */
  async forward(views: AuditEventView[]): Promise<number> {
    await this.load();
    let queued = 0;
    for (const integration of this.integrations) {
      const events = views.filter((v) => passesIntegrationFilter(integration, v));
      if (!events.length) continue;
      const body = integration.type === "syslog"
        ? syslogPayload(events, integration.format)
        : JSON.stringify({ type: "audit.events", integration_id: integration.id, events });
      this.sql.exec(
        "INSERT INTO alert_outbox (rule_id, firing_id, channel, target, secret, subject, body, next_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        integration.id, crypto.randomUUID(), integration.type, integration.destination, integration.webhook_secret,
        `${events.length} audit events`, body, this.now());
      queued++;
    }
    return queued;
  }

  private count(rule: AlertRuleRow, view: AuditEventView): number {
    const at = Date.parse(view.created_at);
    let window = this.windows.get(rule.id);
    if (!window) {
      window = { events: [], above: false, lastFiredAt: Number.NEGATIVE_INFINITY };
      this.windows.set(rule.id, window);
    }
    window.events.push({ at, view });
    const windowStart = at - rule.time_window_s * 1000;
    while (window.events.length && window.events[0].at <= windowStart) window.events.shift();
    if (window.events.length < rule.threshold) {
      window.above = false;
      return 0;
    }
    if (window.above) return 0;
    window.above = true;
    if (at - window.lastFiredAt < rule.cooldown_s * 1000) return 0;
    window.lastFiredAt = at;
    return this.fire(rule, window, windowStart, at);
  }

  private fire(rule: AlertRuleRow, window: Window, windowStart: number, at: number): number {
    const firingId = crypto.randomUUID();
    const payload = {
      type: "audit.alert",
      firing_id: firingId,
      fired_at: new Date(this.now()).toISOString(),
      alert: {
        id: rule.id, name: rule.alert_name, event_types: rule.event_types, threshold: rule.threshold,
        time_window: rule.time_window_s, site_id: rule.site_id, severities: rule.severities,
      },
      window: { start: new Date(windowStart).toISOString(), end: new Date(at).toISOString(), seconds: rule.time_window_s },
      count: window.events.length,
      sample_events: window.events.slice(-ALERT_SAMPLE_EVENTS).map((e) => e.view),
    };
    const body = JSON.stringify(payload);
    const subject = `[Fleet Edge] ${rule.alert_name}: ${window.events.length} events in ${rule.time_window_s} s`;
    let queued = 0;
    const enqueue = (channel: "webhook" | "email", target: string, secret: string | null) => {
      this.sql.exec(
        "INSERT INTO alert_outbox (rule_id, firing_id, channel, target, secret, subject, body, next_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rule.id, firingId, channel, target, secret, subject, body, this.now());
      queued++;
    };
    if (rule.webhook_url) enqueue("webhook", rule.webhook_url, rule.webhook_secret);
    if (rule.email) enqueue("email", rule.email, null);
    return queued;
  }

  /** When the next queued try is due, or undefined when none is queued. */
  nextDue(): number | undefined {
    const row = this.sql.exec<{ at: number | null }>("SELECT min(next_at) AS at FROM alert_outbox").one();
    return row.at ?? undefined;
  }

  /** Makes the tries that are due; each one is recorded in D1's delivery log. */
  async deliverDue(settings: DeliverySettings) {
    const due = this.sql.exec<{ id: number; rule_id: string; firing_id: string; channel: "webhook" | "email" | "syslog"; target: string; secret: string | null; subject: string; body: string; tries: number }>(
      "SELECT id, rule_id, firing_id, channel, target, secret, subject, body, tries FROM alert_outbox WHERE next_at <= ? ORDER BY next_at LIMIT ?",
      this.now(), TRIES_PER_WAKE).toArray();
    for (const item of due) {
      const attempt = item.tries + 1;
      const result = item.channel === "webhook" ? await this.tryWebhook(item, attempt, settings)
        : item.channel === "syslog" ? await sendSyslog(item.target, item.body, settings.policy)
        : await this.tryEmail(item, settings);
      const final = result.delivered || result.permanent || attempt >= DELIVERY_MAX_TRIES;
      const nextAt = final ? undefined : this.now() + retryDelayMs(attempt, settings.retryBaseMs, Math.random());
      const outcome = result.delivered ? "delivered" : final ? "failed" : "retrying";
      await this.d1().prepare(
        `INSERT INTO audit_alert_deliveries (rule_id, firing_id, channel, attempt, outcome, http_status, error, next_attempt_at, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
        .bind(item.rule_id, item.firing_id, item.channel, attempt, outcome, result.status ?? null, result.error ?? null,
          nextAt === undefined ? null : new Date(nextAt).toISOString(), new Date(this.now()).toISOString())
        .run()
        .catch((error: unknown) => console.error("recording an alert delivery try failed", error));
      // After the log: once a notification leaves the queue, its last try is on record.
      if (final) this.sql.exec("DELETE FROM alert_outbox WHERE id = ?", item.id);
      else this.sql.exec("UPDATE alert_outbox SET tries = ?, next_at = ? WHERE id = ?", attempt, nextAt, item.id);
    }
  }

  private async tryWebhook(
    item: { target: string; secret: string | null; body: string; firing_id: string },
    attempt: number,
    settings: DeliverySettings,
  ): Promise<SendResult> {
    const secret = item.secret ? await openSecret(settings.rootSecret, item.secret) : undefined;
    if (!secret) return { delivered: false, permanent: true, error: "the signing secret cannot be read (was JWT_SECRET rotated?)" };
    return sendWebhook(item.target, secret, item.body, { "X-Fleet-Delivery": item.firing_id, "X-Fleet-Attempt": String(attempt) }, settings.policy, this.now());
  }

  private async tryEmail(item: { target: string; subject: string; body: string }, settings: DeliverySettings): Promise<SendResult> {
    if (!settings.email || !settings.emailFrom) return { delivered: false, permanent: true, error: "e-mail is unavailable: ALERT_EMAIL and ALERT_EMAIL_FROM are not both configured" };
    try {
      await settings.email.send({
        from: settings.emailFrom,
        to: item.target,
        subject: item.subject,
        text: `${item.subject}\n\n${JSON.stringify(JSON.parse(item.body), null, 2)}\n`,
      });
      return { delivered: true };
    } catch (error) {
      return { delivered: false, error: error instanceof Error ? `${error.name}: ${error.message}`.slice(0, 300) : "sending failed" };
    }
  }
}
