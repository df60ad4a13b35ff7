import { desc, eq, inArray } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { auditAlertDeliveries, auditIntegrations, auditLogs } from "../db/schema";
import { notFound, unprocessable } from "../lib/errors";
import { currentDate, workerClock } from "../lib/clock";
import { auditRow } from "../shared/audit-row";
import { newUuid, randomToken } from "../shared/ids";
import { openSecret, sealSecret } from "../shared/secret-box";
import { webhookUrlProblem } from "../shared/outbound-address";
import { outboundPolicy } from "../shared/audit-settings";
import { passesIntegrationFilter } from "../shared/alert-contract";
import { sendSyslog, sendWebhook, syslogDestinationProblem, syslogPayload, type SendResult } from "../shared/audit-forwarding";
import type { AuditEventView } from "../shared/audit-view";
import { auditStream } from "../hub/audit-stream";

type IntegrationRow = typeof auditIntegrations.$inferSelect;

export interface IntegrationInput {
  type: "syslog" | "webhook";
  destination: string;
  format?: "rfc5424" | "json";
  filter?: { severities?: string[]; categories?: string[] };
}

export const toIntegrationView = (r: IntegrationRow, last?: typeof auditAlertDeliveries.$inferSelect) => ({
  integration_id: r.id,
  type: r.type,
  destination: r.destination,
  format: r.format,
  filter: { severities: r.severities ?? null, categories: r.categories ?? null },
  created_at: r.createdAt,
  last_delivery: last ? { outcome: last.outcome, attempt: last.attempt, error: last.error, created_at: last.createdAt } : null,
});

const destinationIssue = (msg: string) => unprocessable([{ loc: ["body", "destination"], msg, type: "value_error" }]);

export async function createIntegration(db: Db, env: Env, user: AuthUser, input: IntegrationInput, request: Request) {
  const policy = outboundPolicy(env);
  const problem = input.type === "webhook" ? webhookUrlProblem(input.destination, policy) : syslogDestinationProblem(input.destination, policy);
  if (problem) throw destinationIssue(`This destination is refused: ${problem}`);
  const secret = input.type === "webhook" ? `whsec_${randomToken(32)}` : undefined;
  const id = `int_${newUuid()}`;
  const [[row]] = await db.batch([
    db.insert(auditIntegrations).values({
      id,
      type: input.type,
      destination: input.destination,
      format: input.type === "syslog" ? input.format ?? "rfc5424" : "json",
      severities: input.filter?.severities ?? null,
      categories: input.filter?.categories ?? null,
      webhookSecret: secret ? await sealSecret(env.JWT_SECRET ?? "", secret) : null,
      createdBy: user.id,
    }).returning(),
    db.insert(auditLogs).values(auditRow({
      eventType: "config_updated",
      description: `Audit integration (${input.type}) to ${input.destination} created`,
      userId: user.id,
      metadata: { setting: "audit_integration", action: "created", integration_id: id, type: input.type, destination: input.destination },
      request,
    })),
  ]);
  await integrationsChanged(env);
  return { integration: toIntegrationView(row), webhookSecret: secret };
}

async function integrationsChanged(env: Env) {
  try {
    await auditStream(env).alertRulesChanged();
  } catch (error) {
    // The object re-reads them within a minute anyway.
    console.error("telling the audit stream about changed integrations failed", error);
  }
}

export async function listIntegrations(db: Db) {
  const rows = await db.select().from(auditIntegrations).orderBy(auditIntegrations.createdAt).all();
  if (!rows.length) return [];
  const tries = await db.select().from(auditAlertDeliveries).where(inArray(auditAlertDeliveries.ruleId, rows.map((r) => r.id)))
    .orderBy(desc(auditAlertDeliveries.id)).limit(1000).all();
  return rows.map((r) => toIntegrationView(r, tries.find((t) => t.ruleId === r.id)));
}

export async function deleteIntegration(db: Db, env: Env, user: AuthUser, id: string, request: Request) {
  const row = await db.select().from(auditIntegrations).where(eq(auditIntegrations.id, id)).get();
  if (!row) throw notFound(`Integration '${id}' not found`);
  await db.batch([
    db.delete(auditIntegrations).where(eq(auditIntegrations.id, id)),
    db.delete(auditAlertDeliveries).where(eq(auditAlertDeliveries.ruleId, id)),
    db.insert(auditLogs).values(auditRow({
      eventType: "config_updated",
      description: `Audit integration (${row.type}) to ${row.destination} deleted`,
      userId: user.id,
      metadata: { setting: "audit_integration", action: "deleted", integration_id: id },
      request,
    })),
  ]);
  await integrationsChanged(env);
}

/** The event `POST /audit/test` sends: marked as a test, never stored. */
export function testEvent(user: AuthUser): AuditEventView {
  const now = currentDate().toISOString();
  return {
    id: 0, event_type: "integration_test", category: "system_events", severity: "info",
    description: `Test event sent by ${user.email}`, user_id: user.id, job_id: null, device_id: null, site_id: null,
    event_metadata: { test: true }, ip_address: null, user_agent: null, session_id: null, created_at: now, timestamp: now,
    prev_hash: null, hash: null,
  };
}

/** Sends a test event through every integration, once each (no retry), and reports each result. */
export async function testIntegrations(db: Db, env: Env, user: AuthUser) {
  const event = testEvent(user);
  const rows = await db.select().from(auditIntegrations).orderBy(auditIntegrations.createdAt).all();
  const policy = outboundPolicy(env);
  return Promise.all(rows.map(async (r) => {
    let result: SendResult;
    if (r.type === "syslog") {
      result = await sendSyslog(r.destination, syslogPayload([event], r.format), policy);
    } else {
      const secret = r.webhookSecret ? await openSecret(env.JWT_SECRET ?? "", r.webhookSecret) : undefined;
      result = secret
        ? await sendWebhook(r.destination, secret, JSON.stringify({ type: "audit.events", integration_id: r.id, test: true, events: [event] }), { "X-Fleet-Delivery": `test-${newUuid()}` }, policy, workerClock.now())
        : { delivered: false, error: "the signing secret cannot be read (was JWT_SECRET rotated?)" };
    }
    return {
      integration_id: r.id, type: r.type, destination: r.destination,
      passes_filter: passesIntegrationFilter({ severities: r.severities ?? null, categories: r.categories ?? null }, event),
      delivered: result.delivered, http_status: result.status ?? null, error: result.error ?? null,
    };
  }));
}
