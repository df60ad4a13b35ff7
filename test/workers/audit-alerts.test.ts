import { describe, expect, it } from "vitest";
import { env, runInDurableObject } from "cloudflare:test";
import { and, eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { auditStream } from "../../src/hub/audit-stream";
import { AUDIT_STREAM_NAME } from "../../src/shared/audit-stream-contract";
import { openSecret } from "../../src/shared/secret-box";
import { admin, call, createSite, db, eventually, signup, unique } from "./helpers";

const create = (token: string, body: Record<string, unknown>) => call("/api/v1/audit/alerts", { method: "POST", token, body });
const ruleBody = (overrides: Record<string, unknown> = {}) => ({
  alert_name: "Too many failed logins", event_types: ["login_failed"], threshold: 5, time_window: 300,
  notification: { webhook: "https://hooks.example.com/fleet" }, ...overrides,
});
const configUpdates = async (alertId: string) => (await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.eventType, "config_updated")).all())
  .filter((r) => (r.eventMetadata as { alert_id?: string }).alert_id === alertId);

describe("alert rules", () => {
  it("are created, read, listed, changed and deleted by administrators, each change audited", async () => {
    const a = await admin();
    const siteId = await createSite(a.token);
    const created = await create(a.token, ruleBody({ site_id: siteId, severities: ["warning", "error"], cooldown: 60 }));
    expect(created.status).toBe(201);
    expect(created.json).toMatchObject({
      alert_name: "Too many failed logins", event_types: ["login_failed"], threshold: 5, time_window: 300, site_id: siteId,
      severities: ["warning", "error"], cooldown: 60, enabled: true, notification: { webhook: "https://hooks.example.com/fleet", email: null }, email_status: null,
    });
    const id = created.json.alert_id as string;
    const secret = created.json.webhook_secret as string;
    expect(secret).toMatch(/^whsec_/);
    // Stored sealed, readable with the service's secret only.
    const stored = (await db().select().from(schema.auditAlertRules).where(eq(schema.auditAlertRules.id, id)).get())!;
    expect(stored.webhookSecret).not.toContain(secret);
    expect(await openSecret(env.JWT_SECRET!, stored.webhookSecret!)).toBe(secret);
    expect(await openSecret("some-other-secret-of-enough-length-000000000", stored.webhookSecret!)).toBeUndefined();

    const read = await call(`/audit/alerts/${id}`, { token: a.token });
    expect(read.status).toBe(200);
    expect(read.json).not.toHaveProperty("webhook_secret");
    expect((await call("/api/v1/audit/alerts", { token: a.token })).json.alerts.map((r: { alert_id: string }) => r.alert_id)).toContain(id);

    const patched = await call(`/api/v1/audit/alerts/${id}`, { method: "PATCH", token: a.token, body: { threshold: 7, enabled: false, notification: { email: "ops@example.com" } } });
    expect(patched.status).toBe(200);
    expect(patched.json).toMatchObject({ threshold: 7, enabled: false, notification: { webhook: "https://hooks.example.com/fleet", email: "ops@example.com" }, webhook_secret: null });
    // The pool has the send_email binding but no ALERT_EMAIL_FROM: e-mail says it is unavailable.
    expect(patched.json.email_status).toBe("unavailable");

    const deleted = await call(`/api/v1/audit/alerts/${id}`, { method: "DELETE", token: a.token });
    expect(deleted.json).toEqual({ deleted: true, alert_id: id });
    expect((await call(`/api/v1/audit/alerts/${id}`, { token: a.token })).status).toBe(404);
    expect((await call(`/api/v1/audit/alerts/${id}/deliveries`, { token: a.token })).status).toBe(404);
    const audited = await configUpdates(id);
    expect(audited.map((r) => (r.eventMetadata as { action: string }).action)).toEqual(["created", "updated", "deleted"]);
    expect(JSON.stringify(audited)).not.toContain(secret);
  });

  it("are administrators' only", async () => {
    const user = await signup();
    expect((await create(user.token, ruleBody())).status).toBe(403);
    expect((await call("/api/v1/audit/alerts", { token: user.token })).status).toBe(403);
    expect((await call("/api/v1/audit/alerts")).status).toBe(401);
  });

  it("refuse bad input with 422 and create nothing", async () => {
    const a = await admin();
    const before = (await db().select().from(schema.auditAlertRules).all()).length;
    const bad = [
      ruleBody({ threshold: 0 }), ruleBody({ time_window: 5 }), ruleBody({ event_types: [] }), ruleBody({ event_types: ["Not Snake"] }),
      ruleBody({ notification: {} }), ruleBody({ notification: { email: "not-an-address" } }), ruleBody({ severities: ["loud"] }),
      ruleBody({ site_id: unique("NO-SUCH-SITE-") }), ruleBody({ alert_name: "" }), ruleBody({ cooldown: -1 }),
    ];
    for (const body of bad) expect((await create(a.token, body)).status, JSON.stringify(body)).toBe(422);
    expect((await call(`/api/v1/audit/alerts/${unique("alr_")}`, { method: "PATCH", token: a.token, body: { threshold: 0 } })).status).toBe(422);
    expect((await db().select().from(schema.auditAlertRules).all()).length).toBe(before);
  });

  it("refuse webhooks to non-public destinations in the default configuration", async () => {
    const a = await admin();
    const refused = [
      "http://hooks.example.com/x", "http://127.0.0.1:8080/hook", "https://127.0.0.1/hook", "https://10.0.0.5/hook", "https://192.168.1.20/hook",
      "https://169.254.169.254/latest/meta-data", "https://100.64.0.1/", "https://[::1]/", "https://[fd00::1]/", "https://224.0.0.1/",
      "https://localhost/hook", "https://metadata.google.internal/", "https://nas.local/", "https://user:pw@hooks.example.com/",
    ];
    for (const webhook of refused) {
      const res = await create(a.token, ruleBody({ notification: { webhook } }));
      expect(res.status, webhook).toBe(422);
      expect(res.json.detail[0].loc, webhook).toEqual(["body", "notification", "webhook"]);
    }
    const existing = (await create(a.token, ruleBody())).json.alert_id;
    const patch = await call(`/api/v1/audit/alerts/${existing}`, { method: "PATCH", token: a.token, body: { notification: { webhook: "https://10.0.0.5/" } } });
    expect(patch.status).toBe(422);
    expect((await call(`/api/v1/audit/alerts/${existing}`, { token: a.token })).json.notification.webhook).toBe("https://hooks.example.com/fleet");
  });
});

describe("alert evaluation", () => {
  const stub = () => env.AUDIT_STREAM.get(env.AUDIT_STREAM.idFromName(AUDIT_STREAM_NAME));

  /**
   * Inserts events of `type` at the given offsets (seconds) from `base`, then lets the object publish
   * them and waits until its alarm made every try that was due (e-mail fails at once in the pool).
   */
  async function eventsAt(type: string, base: number, offsets: number[], extra: Partial<typeof schema.auditLogs.$inferInsert> = {}) {
    for (const s of offsets) {
      await db().insert(schema.auditLogs).values({ eventType: type, category: "business_events", createdAt: new Date(base + s * 1000).toISOString(), ...extra });
    }
    await auditStream(env).nudge();
    await eventually(() => runInDurableObject(stub(), (_instance, state) =>
      state.storage.sql.exec<{ n: number }>("SELECT count(*) AS n FROM alert_outbox").one().n === 0));
  }

  const firings = async (alertId: string) => {
    const tries = await db().select().from(schema.auditAlertDeliveries).where(eq(schema.auditAlertDeliveries.ruleId, alertId)).all();
    return new Set(tries.map((t) => t.firingId)).size;
  };

  async function emailRule(token: string, type: string, overrides: Record<string, unknown> = {}) {
    const res = await create(token, { alert_name: type, event_types: [type], threshold: 3, time_window: 60, cooldown: 0, notification: { email: "ops@example.com" }, ...overrides });
    expect(res.status).toBe(201);
    return res.json.alert_id as string;
  }

  it("fires once per crossing of the threshold, and again only after the count fell below it", async () => {
    const a = await admin();
    const type = unique("burst_");
    const id = await emailRule(a.token, type);
    const base = Date.now() - 3_600_000;
    await eventsAt(type, base, [0, 1]);
    expect(await firings(id)).toBe(0);
    await eventsAt(type, base, [2, 3, 4]);
    expect(await firings(id)).toBe(1);
    // 100 s later the window holds one event: re-armed; the third one crosses again.
    await eventsAt(type, base, [100, 101, 102]);
    expect(await firings(id)).toBe(2);

    // E-mail is unavailable in the pool: the try is logged as failed at once, with why.
    const log = await call(`/api/v1/audit/alerts/${id}/deliveries`, { token: a.token });
    expect(log.status).toBe(200);
    expect(log.json.deliveries).toHaveLength(2);
    expect(log.json.deliveries[0]).toMatchObject({ channel: "email", attempt: 1, outcome: "failed", http_status: null, next_attempt_at: null });
    expect(log.json.deliveries[0].error).toMatch(/unavailable/);
    // The trail's status counts them as given up on, none waiting for a retry.
    const status = await call("/api/v1/audit/status", { token: a.token });
    expect(status.json.deliveries).toEqual({ pending_retry: 0, failed_last_day: 2 });
  });

  it("does not fire again within the cooldown", async () => {
    const a = await admin();
    const type = unique("cooldown_");
    const id = await emailRule(a.token, type, { cooldown: 3600 });
    const base = Date.now() - 7_200_000;
    await eventsAt(type, base, [0, 1, 2]);
    await eventsAt(type, base, [100, 101, 102]);
    expect(await firings(id)).toBe(1);
    await eventsAt(type, base, [3700, 3701, 3702]);
    expect(await firings(id)).toBe(2);
  });

  it("counts only the rule's site and severities; a disabled rule does not fire", async () => {
    const a = await admin();
    const siteId = await createSite(a.token);
    const type = unique("scoped_");
    const scoped = await emailRule(a.token, type, { site_id: siteId, severities: ["error"] });
    const disabled = await emailRule(a.token, type, { enabled: false });
    const base = Date.now() - 3_600_000;
    await eventsAt(type, base, [0, 1, 2], { severity: "error" }); // no site
    await eventsAt(type, base, [3, 4, 5], { siteId, severity: "warning" });
    expect(await firings(scoped)).toBe(0);
    await eventsAt(type, base, [6, 7, 8], { siteId, severity: "error" });
    expect(await firings(scoped)).toBe(1);
    expect(await firings(disabled)).toBe(0);
    expect((await db().select().from(schema.auditAlertDeliveries).where(and(eq(schema.auditAlertDeliveries.ruleId, disabled))).all())).toEqual([]);
  });
});
