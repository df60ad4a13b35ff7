import { and, desc, eq } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { auditAlertDeliveries, auditAlertRules, auditLogs } from "../db/schema";
import { notFound, unprocessable } from "../lib/errors";
import { currentDate } from "../lib/clock";
import { auditRow } from "../shared/audit-row";
import { newUuid, randomToken } from "../shared/ids";
import { sealSecret } from "../shared/secret-box";
import { webhookUrlProblem } from "../shared/outbound-address";
import { emailAvailable, outboundPolicy } from "../shared/audit-settings";
import { auditStream } from "../hub/audit-stream";
import { findSite } from "./access";

type RuleRow = typeof auditAlertRules.$inferSelect;

export interface AlertRuleInput {
  alert_name: string;
  event_types: string[];
  threshold: number;
  time_window: number;
  site_id?: string | null;
  severities?: string[] | null;
  cooldown?: number;
  enabled?: boolean;
  notification: { email?: string | null; webhook?: string | null };
}

export type AlertRulePatch = Partial<AlertRuleInput>;

/** A rule as the API shows it: never its secret. */
export const toAlertRuleView = (env: Env, r: RuleRow) => ({
  alert_id: r.id,
  alert_name: r.alertName,
  event_types: r.eventTypes,
  threshold: r.threshold,
  time_window: r.timeWindowS,
  site_id: r.siteId,
  severities: r.severities ?? null,
  cooldown: r.cooldownS,
  enabled: r.enabled,
  notification: { webhook: r.webhookUrl, email: r.email },
  email_status: r.email ? (emailAvailable(env) ? "available" as const : "unavailable" as const) : null,
  created_at: r.createdAt,
  updated_at: r.updatedAt,
});

const issue = (loc: (string | number)[], msg: string) => unprocessable([{ loc: ["body", ...loc], msg, type: "value_error" }]);

async function checkTargets(db: Db, env: Env, input: AlertRulePatch) {
  if (input.notification?.webhook) {
    const problem = webhookUrlProblem(input.notification.webhook, outboundPolicy(env));
    if (problem) throw issue(["notification", "webhook"], `This webhook URL is refused: ${problem}`);
  }
  if (input.site_id && !(await findSite(db, input.site_id))) throw issue(["site_id"], `Site '${input.site_id}' does not exist`);
}

/** The audit row of a rule change; names what changed, never a secret. */
const configUpdated = (user: AuthUser, request: Request, action: string, rule: { id: string; alertName: string }, changed: string[]) => auditRow({
  eventType: "config_updated",
  description: `Audit alert rule "${rule.alertName}" ${action}`,
  userId: user.id,
  metadata: { setting: "audit_alert", action, alert_id: rule.id, changed },
  request,
});

async function rulesChanged(env: Env) {
  try {
    await auditStream(env).alertRulesChanged();
  } catch (error) {
    // The object re-reads the rules within a minute anyway.
    console.error("telling the audit stream about changed alert rules failed", error);
  }
}

/** Creates a rule; a webhook gets a fresh signing secret, returned here once and stored only sealed. */
export async function createAlertRule(db: Db, env: Env, user: AuthUser, input: AlertRuleInput, request: Request) {
  await checkTargets(db, env, input);
  const secret = input.notification.webhook ? `whsec_${randomToken(32)}` : undefined;
  const id = `alr_${newUuid()}`;
  const values = {
    id,
    alertName: input.alert_name,
    eventTypes: input.event_types,
    threshold: input.threshold,
    timeWindowS: input.time_window,
    siteId: input.site_id ?? null,
    severities: input.severities ?? null,
    cooldownS: input.cooldown ?? DEFAULT_COOLDOWN_S,
    enabled: input.enabled ?? true,
    webhookUrl: input.notification.webhook ?? null,
    webhookSecret: secret ? await sealSecret(env.JWT_SECRET ?? "", secret) : null,
    email: input.notification.email ?? null,
    createdBy: user.id,
  };
  const [[rule]] = await db.batch([
    db.insert(auditAlertRules).values(values).returning(),
    db.insert(auditLogs).values(configUpdated(user, request, "created", values, Object.keys(input))),
  ]);
  await rulesChanged(env);
  return { rule: toAlertRuleView(env, rule), webhookSecret: secret };
}

/** A rule fires at most once per cooldown unless it says otherwise. */
export const DEFAULT_COOLDOWN_S = 900;

export async function findAlertRule(db: Db, id: string) {
  const rule = await db.select().from(auditAlertRules).where(eq(auditAlertRules.id, id)).get();
  if (!rule) throw notFound(`Alert rule '${id}' not found`);
  return rule;
}

export const listAlertRules = (db: Db) => db.select().from(auditAlertRules).orderBy(auditAlertRules.createdAt).all();

export async function updateAlertRule(db: Db, env: Env, user: AuthUser, id: string, patch: AlertRulePatch, request: Request) {
  const existing = await findAlertRule(db, id);
  await checkTargets(db, env, patch);
  const notification = patch.notification;
  const webhook = notification && "webhook" in notification ? notification.webhook ?? null : existing.webhookUrl;
  const email = notification && "email" in notification ? notification.email ?? null : existing.email;
  if (!webhook && !email) throw issue(["notification"], "A rule needs a webhook or an e-mail address to notify");
  // A rule that gains a webhook gets a secret; one that keeps or changes its URL keeps its secret.
  const secret = webhook && !existing.webhookSecret ? `whsec_${randomToken(32)}` : undefined;
  const changes = {
    ...(patch.alert_name !== undefined ? { alertName: patch.alert_name } : {}),
    ...(patch.event_types !== undefined ? { eventTypes: patch.event_types } : {}),
    ...(patch.threshold !== undefined ? { threshold: patch.threshold } : {}),
    ...(patch.time_window !== undefined ? { timeWindowS: patch.time_window } : {}),
    ...(patch.site_id !== undefined ? { siteId: patch.site_id } : {}),
    ...(patch.severities !== undefined ? { severities: patch.severities } : {}),
    ...(patch.cooldown !== undefined ? { cooldownS: patch.cooldown } : {}),
    ...(patch.enabled !== undefined ? { enabled: patch.enabled } : {}),
    webhookUrl: webhook,
    webhookSecret: webhook ? (secret ? await sealSecret(env.JWT_SECRET ?? "", secret) : existing.webhookSecret) : null,
    email,
    updatedAt: currentDate().toISOString(),
  };
  const [[rule]] = await db.batch([
    db.update(auditAlertRules).set(changes).where(eq(auditAlertRules.id, id)).returning(),
    db.insert(auditLogs).values(configUpdated(user, request, "updated", existing, Object.keys(patch))),
  ]);
  await rulesChanged(env);
  return { rule: toAlertRuleView(env, rule), webhookSecret: secret };
}

export async function deleteAlertRule(db: Db, env: Env, user: AuthUser, id: string, request: Request) {
  const existing = await findAlertRule(db, id);
  await db.batch([
    db.delete(auditAlertRules).where(eq(auditAlertRules.id, id)),
    db.delete(auditAlertDeliveries).where(eq(auditAlertDeliveries.ruleId, id)),
    db.insert(auditLogs).values(configUpdated(user, request, "deleted", existing, [])),
  ]);
  await rulesChanged(env);
}

export async function listDeliveries(db: Db, id: string, limit: number, firingId?: string) {
  await findAlertRule(db, id);
  const rows = await db.select().from(auditAlertDeliveries)
    .where(and(eq(auditAlertDeliveries.ruleId, id), firingId ? eq(auditAlertDeliveries.firingId, firingId) : undefined))
    .orderBy(desc(auditAlertDeliveries.id)).limit(limit).all();
  return rows.map((r) => ({
    id: r.id,
    firing_id: r.firingId,
    channel: r.channel,
    attempt: r.attempt,
    outcome: r.outcome,
    http_status: r.httpStatus,
    error: r.error,
    next_attempt_at: r.nextAttemptAt,
    created_at: r.createdAt,
  }));
}
