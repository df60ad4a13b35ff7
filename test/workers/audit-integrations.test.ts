import { describe, expect, it } from "vitest";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { rfc5424Message, syslogPayload } from "../../src/shared/audit-forwarding";
import type { AuditEventView } from "../../src/shared/audit-view";
import { admin, call, db, signup } from "./helpers";

const create = (token: string, body: Record<string, unknown>) => call("/api/v1/audit/integrations", { method: "POST", token, body });

describe("integrations", () => {
  // Their filters let through only business events, which this file never records: nothing is
  // forwarded to the made-up destinations (the pool has no network).
  it("are created, listed and deleted by administrators, each change audited", async () => {
    const a = await admin();
    const syslog = await create(a.token, { type: "syslog", destination: "tls://syslog.example.com:6514", filter: { severities: ["critical", "error"], categories: ["business_events"] } });
    expect(syslog.status).toBe(201);
    expect(syslog.json).toMatchObject({
      type: "syslog", destination: "tls://syslog.example.com:6514", format: "rfc5424",
      filter: { severities: ["critical", "error"], categories: ["business_events"] }, webhook_secret: null, last_delivery: null,
    });
    const hook = await create(a.token, { type: "webhook", destination: "https://siem.example.com/ingest", format: "rfc5424", filter: { categories: ["business_events"] } });
    expect(hook.status).toBe(201);
    expect(hook.json.format).toBe("json");
    expect(hook.json.webhook_secret).toMatch(/^whsec_/);
    const stored = (await db().select().from(schema.auditIntegrations).where(eq(schema.auditIntegrations.id, hook.json.integration_id)).get())!;
    expect(stored.webhookSecret).not.toContain(hook.json.webhook_secret);

    const listed = await call("/audit/integrations", { token: a.token });
    expect(listed.json.integrations.map((i: { integration_id: string }) => i.integration_id)).toEqual(expect.arrayContaining([syslog.json.integration_id, hook.json.integration_id]));
    const id = syslog.json.integration_id;
    expect((await call(`/api/v1/audit/integrations/${id}`, { method: "DELETE", token: a.token })).json).toEqual({ deleted: true, integration_id: id });
    expect((await call(`/api/v1/audit/integrations/${id}`, { method: "DELETE", token: a.token })).status).toBe(404);
    const audited = (await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.eventType, "config_updated")).all())
      .filter((r) => (r.eventMetadata as { integration_id?: string }).integration_id === id);
    expect(audited.map((r) => (r.eventMetadata as { action: string }).action)).toEqual(["created", "deleted"]);
  });

  it("refuse non-public or malformed destinations and bad input with 422, creating nothing", async () => {
    const a = await admin();
    const before = (await db().select().from(schema.auditIntegrations).all()).length;
    const bad = [
      { type: "syslog", destination: "tcp://127.0.0.1:514" }, { type: "syslog", destination: "tcp://10.0.0.7:514" },
      { type: "syslog", destination: "tls://[fe80::1]:6514" }, { type: "syslog", destination: "tcp://syslog.internal:514" },
      { type: "syslog", destination: "udp://syslog.example.com:514" }, { type: "syslog", destination: "syslog.example.com" },
      { type: "syslog", destination: "tcp://syslog.example.com:99999" }, { type: "webhook", destination: "http://siem.example.com/" },
      { type: "webhook", destination: "https://169.254.169.254/" }, { type: "kafka", destination: "tcp://k.example.com:9092" },
      { type: "syslog", destination: "tls://syslog.example.com:6514", format: "cef" },
      { type: "syslog", destination: "tls://syslog.example.com:6514", filter: { severities: ["loud"] } },
    ];
    for (const body of bad) expect((await create(a.token, body)).status, JSON.stringify(body)).toBe(422);
    expect((await db().select().from(schema.auditIntegrations).all()).length).toBe(before);
  });

  it("are administrators' only, and so is the test", async () => {
    const user = await signup();
    expect((await create(user.token, { type: "syslog", destination: "tls://syslog.example.com:6514" })).status).toBe(403);
    expect((await call("/api/v1/audit/test", { method: "POST", token: user.token })).status).toBe(403);
  });
});

describe("syslog messages", () => {
  const event: AuditEventView = {
    id: 42, event_type: "login_failed", category: "security_events", severity: "warning", description: "Failed login for ä@example.com",
    user_id: 7, job_id: null, device_id: null, site_id: "S\"1]", event_metadata: { email: "ä@example.com" }, ip_address: "198.51.100.4",
    user_agent: null, session_id: null, created_at: "2026-01-01T12:00:00.000Z", timestamp: "2026-01-01T12:00:00.000Z", prev_hash: null, hash: "ab",
  };

  it("are RFC 5424 with facility log audit, escaped structured data, octet-counted in bytes", () => {
    const message = rfc5424Message(event);
    // facility 13 × 8 + severity warning (4)
    expect(message.startsWith("<108>1 2026-01-01T12:00:00.000Z fleet-edge fleet-edge - login_failed [audit@32473 id=\"42\"")).toBe(true);
    expect(message).toContain('site="S\\"1\\]"');
    expect(message).not.toContain("job=");
    const framed = syslogPayload([event, event], "rfc5424");
    const length = new TextEncoder().encode(message).byteLength;
    expect(framed).toBe(`${length} ${message}${length} ${message}`);
    expect(length).toBeGreaterThan(message.length); // UTF-8 bytes, not characters
    expect(syslogPayload([event], "json")).toBe(`${JSON.stringify(event)}\n`);
  });
});
