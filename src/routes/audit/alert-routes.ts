import { z } from "@hono/zod-openapi";
import { lineText } from "../../lib/text";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import {
  DEFAULT_COOLDOWN_S, createAlertRule, deleteAlertRule, findAlertRule, listAlertRules, listDeliveries, toAlertRuleView, updateAlertRule,
} from "../../services/audit-alerts";
import { DELIVERY_MAX_TRIES } from "../../shared/alert-contract";
import { SEVERITIES } from "../../shared/vocabulary";
import type { MountOptions } from "../mount";

const TAGS = ["Audit"];

const eventType = z.string().min(1).max(64).regex(/^[a-z][a-z0-9_.]*$/, "lower_snake_case");

const Notification = z.object({
  webhook: z.string().max(2048).nullable().optional().openapi({
    description: "HTTPS URL of a public host. Refused (422): other schemes, credentials in the URL, loopback, private, link-local (cloud metadata), CGNAT, multicast and reserved addresses as literals, and internal names (localhost, single-label names, .local, .internal, .lan, .home.arpa …). Redirects are not followed.",
  }),
  email: z.email().max(254).nullable().optional().openapi({ description: "Sent through the send_email binding; the rule's `email_status` says whether that is configured" }),
});

const RuleFields = {
  alert_name: lineText().min(1).max(100),
  event_types: z.array(eventType).min(1).max(20).openapi({ description: "The event types this rule counts" }),
  threshold: z.number().int().min(1).max(10_000).openapi({ description: "Fire when this many matching events fall within `time_window`" }),
  time_window: z.number().int().min(10).max(86_400).openapi({ description: "The sliding window, in seconds" }),
  site_id: lineText().max(64).nullable().optional().openapi({ description: "Count only this site's events (default: every site and service-wide events)" }),
  severities: z.array(z.enum(SEVERITIES)).min(1).nullable().optional().openapi({ description: "Count only events of these severities (default: all)" }),
  cooldown: z.number().int().min(0).max(86_400).optional().openapi({ description: `Seconds after a firing during which the rule does not fire again (default ${DEFAULT_COOLDOWN_S})` }),
  enabled: z.boolean().optional().openapi({ description: "Default true" }),
};

const CreateBody = z
  .object({ ...RuleFields, notification: Notification })
  .refine((b) => Boolean(b.notification.webhook || b.notification.email), { message: "Name a webhook, an e-mail address or both", path: ["notification"] })
  .openapi("AuditAlertRuleCreate");

const PatchBody = z
  .object({
    alert_name: RuleFields.alert_name.optional(),
    event_types: RuleFields.event_types.optional(),
    threshold: RuleFields.threshold.optional(),
    time_window: RuleFields.time_window.optional(),
    site_id: RuleFields.site_id,
    severities: RuleFields.severities,
    cooldown: RuleFields.cooldown,
    enabled: RuleFields.enabled,
    notification: Notification.optional().openapi({ description: "Only the channels named change; null removes one. The webhook secret is kept when the URL changes" }),
  })
  .openapi("AuditAlertRulePatch");

const Rule = z
  .object({
    alert_id: z.string(),
    alert_name: z.string(),
    event_types: z.array(z.string()),
    threshold: z.number().int(),
    time_window: z.number().int(),
    site_id: z.string().nullable(),
    severities: z.array(z.string()).nullable(),
    cooldown: z.number().int(),
    enabled: z.boolean(),
    notification: z.object({ webhook: z.string().nullable(), email: z.string().nullable() }),
    email_status: z.enum(["available", "unavailable"]).nullable().openapi({
      description: "For a rule with an e-mail address: `unavailable` when the service has no send_email binding (ALERT_EMAIL) and sender (ALERT_EMAIL_FROM); such notifications are logged as failed, not sent",
    }),
    created_at: z.string(),
    updated_at: z.string(),
  })
  .openapi("AuditAlertRule");

const CreatedRule = Rule.extend({
  webhook_secret: z.string().nullable().openapi({
    description: "The webhook signing secret, shown only here (and when a PATCH adds a webhook to a rule without one). Each delivery carries `X-Fleet-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, \"<t>.<body>\")>`; reject stale timestamps",
  }),
}).openapi("AuditAlertRuleCreated");

const Delivery = z
  .object({
    id: z.number().int(),
    firing_id: z.string().openapi({ description: "One firing of the rule; its tries share it (also sent as X-Fleet-Delivery)" }),
    channel: z.enum(["webhook", "email", "syslog"]),
    attempt: z.number().int(),
    outcome: z.enum(["delivered", "retrying", "failed"]),
    http_status: z.number().int().nullable(),
    error: z.string().nullable(),
    next_attempt_at: z.string().nullable(),
    created_at: z.string(),
  })
  .openapi("AuditAlertDelivery");

const AlertParams = z.object({ alert_id: lineText().max(64) });
const DeliveriesQuery = z.object({
  limit: z.coerce.number().int().min(1).max(500).default(100),
  firing_id: lineText().max(64).optional(),
});

/** Alert rules over the audit trail and their delivery log (docs/audit.md, "Alerts"). */
export function auditAlertRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;

  app.openapi(
    apiRoute({
      method: "post", path: "/alerts", auth: "admin", deprecated, tags: TAGS,
      summary: "Create an alert rule",
      description: `Counts matching audit events in a sliding window as they are published; when the count reaches \`threshold\` the rule fires once (it re-arms when the count falls below again) and not again within \`cooldown\`. A firing is sent to the webhook (signed JSON: the rule, the window, the count and up to 10 sample events) and/or by e-mail, with up to ${DELIVERY_MAX_TRIES} tries over about an hour (jittered exponential backoff); every try is in the delivery log. Recorded as \`config_updated\`. See docs/audit.md.`,
      request: jsonBody(CreateBody),
      responses: { 201: jsonResponse(CreatedRule, "The rule, with its webhook secret (shown once)") },
    }),
    async (c) => {
      const { rule, webhookSecret } = await createAlertRule(c.var.db, c.env, c.var.user!, c.req.valid("json"), c.req.raw);
      return c.json({ ...rule, webhook_secret: webhookSecret ?? null }, 201);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/alerts", auth: "admin", deprecated, tags: TAGS,
      summary: "List alert rules",
      responses: { 200: jsonResponse(z.object({ alerts: z.array(Rule) }).openapi("AuditAlertRuleList"), "The rules, oldest first") },
    }),
    async (c) => c.json({ alerts: (await listAlertRules(c.var.db)).map((r) => toAlertRuleView(c.env, r)) }, 200),
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/alerts/{alert_id}", auth: "admin", deprecated, tags: TAGS,
      summary: "Read an alert rule",
      request: { params: AlertParams },
      responses: { 200: jsonResponse(Rule, "The rule") },
      errors: [404],
    }),
    async (c) => c.json(toAlertRuleView(c.env, await findAlertRule(c.var.db, c.req.valid("param").alert_id)), 200),
  );

  app.openapi(
    apiRoute({
      method: "patch", path: "/alerts/{alert_id}", auth: "admin", deprecated, tags: TAGS,
      summary: "Change an alert rule",
      description: "Changes the fields given. Its window restarts empty when the rule is re-read. Recorded as `config_updated`.",
      request: { params: AlertParams, ...jsonBody(PatchBody) },
      responses: { 200: jsonResponse(CreatedRule, "The rule; `webhook_secret` is set only when this change gave it a webhook (and so a new secret)") },
      errors: [404],
    }),
    async (c) => {
      const { rule, webhookSecret } = await updateAlertRule(c.var.db, c.env, c.var.user!, c.req.valid("param").alert_id, c.req.valid("json"), c.req.raw);
      return c.json({ ...rule, webhook_secret: webhookSecret ?? null }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "delete", path: "/alerts/{alert_id}", auth: "admin", deprecated, tags: TAGS,
      summary: "Delete an alert rule",
      description: "Deletes the rule, its delivery log and its notifications still waiting for a try. Recorded as `config_updated`.",
      request: { params: AlertParams },
      responses: { 200: jsonResponse(z.object({ deleted: z.literal(true), alert_id: z.string() }).openapi("AuditAlertRuleDeleted"), "Deleted") },
      errors: [404],
    }),
    async (c) => {
      const { alert_id } = c.req.valid("param");
      await deleteAlertRule(c.var.db, c.env, c.var.user!, alert_id, c.req.raw);
      return c.json({ deleted: true as const, alert_id }, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/alerts/{alert_id}/deliveries", auth: "admin", deprecated, tags: TAGS,
      summary: "An alert rule's delivery log",
      description: `Every try of every notification, newest first: \`retrying\` (with \`next_attempt_at\`), then \`delivered\` or \`failed\` (after ${DELIVERY_MAX_TRIES} tries, or at once when the destination is refused or e-mail is unavailable).`,
      request: { params: AlertParams, query: DeliveriesQuery },
      responses: { 200: jsonResponse(z.object({ deliveries: z.array(Delivery) }).openapi("AuditAlertDeliveryList"), "The tries") },
      errors: [404],
    }),
    async (c) => {
      const { limit, firing_id } = c.req.valid("query");
      return c.json({ deliveries: await listDeliveries(c.var.db, c.req.valid("param").alert_id, limit, firing_id) }, 200);
    },
  );

  return app;
}
