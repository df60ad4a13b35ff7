import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it } from "vitest";
import { admin, call, signup } from "./helpers";

let adminToken: string;
let alice: { id: number; email: string };
let bob: { id: number; email: string };

interface Row { eventType: string; category: string; severity: string; userId?: number | null; deviceId?: string | null; siteId?: string | null; ip?: string | null; at: string }

async function insertEvents(rows: Row[]) {
  const statement = env.DB.prepare(
    "INSERT INTO audit_logs (event_type, category, severity, user_id, device_id, site_id, ip_address, event_metadata, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, '{}', ?8)");
  await env.DB.batch(rows.map((r) => statement.bind(r.eventType, r.category, r.severity, r.userId ?? null, r.deviceId ?? null, r.siteId ?? null, r.ip ?? null, r.at)));
}

const period = { start: "2011-05-01T00:00:00Z", end: "2011-05-04T00:00:00Z" };
const report = (body: Record<string, unknown>, path = "/api/v1/audit/reports") =>
  call(path, { method: "POST", token: adminToken, body: { period, ...body } });

beforeAll(async () => {
  adminToken = (await admin()).token;
  alice = await signup();
  bob = await signup();
  const login = (userId: number, ok: boolean, at: string, ip: string): Row => ({
    eventType: ok ? "login_success" : "login_failed", category: "security_events", severity: ok ? "info" : "warning", userId, ip, at,
  });
  const device = (eventType: string, deviceId: string, at: string, severity = "info"): Row => ({
    eventType, category: "device_management", severity, deviceId, siteId: "S-REPORT", at,
  });
  await insertEvents([
    login(alice.id, false, "2011-05-01T08:00:00.000Z", "198.51.100.7"),
    login(alice.id, false, "2011-05-01T08:01:00.000Z", "198.51.100.7"),
    login(alice.id, true, "2011-05-01T08:02:00.000Z", "198.51.100.7"),
    login(bob.id, true, "2011-05-02T09:00:00.000Z", "203.0.113.9"),
    device("device_offline", "POS-1", "2011-05-02T10:00:00.000Z", "warning"),
    device("device_offline", "POS-1", "2011-05-03T10:00:00.000Z", "warning"),
    device("device_registered", "POS-2", "2011-05-03T11:00:00.000Z"),
    { eventType: "job_created", category: "job_management", severity: "info", userId: bob.id, siteId: "S-REPORT", at: "2011-05-03T12:00:00.000Z" },
    // outside the period
    login(alice.id, false, "2011-04-30T23:59:59.999Z", "198.51.100.7"),
    device("device_offline", "POS-1", "2011-05-04T00:00:00.000Z"),
  ]);
});

describe("POST /audit/reports", () => {
  it("summary: counts by category, severity and type, top actors and devices, and days", async () => {
    const res = await report({ report_type: "summary" });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({
      report_type: "summary", period: { start: "2011-05-01T00:00:00.000Z", end: "2011-05-04T00:00:00.000Z" }, categories: null,
      total_events: 8,
      by_category: { security_events: 4, device_management: 3, job_management: 1 },
      by_severity: { info: 4, warning: 4 },
      by_event_type: { login_failed: 2, login_success: 2, device_offline: 2, device_registered: 1, job_created: 1 },
      top_actors: [{ user_id: alice.id, email: alice.email, events: 3 }, { user_id: bob.id, email: bob.email, events: 2 }],
      top_devices: [{ device_id: "POS-1", site_id: "S-REPORT", events: 2 }, { device_id: "POS-2", site_id: "S-REPORT", events: 1 }],
      top_ip_addresses: [{ ip_address: "198.51.100.7", events: 3 }, { ip_address: "203.0.113.9", events: 1 }],
      daily: [{ day: "2011-05-01", events: 3 }, { day: "2011-05-02", events: 2 }, { day: "2011-05-03", events: 3 }],
    });
  });

  it("security counts only security events; device_activity only events naming a device; user_activity only those naming a user", async () => {
    const security = await report({ report_type: "security" });
    expect(security.json).toMatchObject({ total_events: 4, by_event_type: { login_failed: 2, login_success: 2 }, top_devices: [] });
    const devices = await report({ report_type: "device_activity" });
    expect(devices.json).toMatchObject({ total_events: 3, by_severity: { warning: 2, info: 1 }, top_actors: [] });
    const usersReport = await report({ report_type: "user_activity" }, "/audit/reports");
    expect(usersReport.status).toBe(200);
    expect(usersReport.json).toMatchObject({ total_events: 5, by_category: { security_events: 4, job_management: 1 } });
  });

  it("a categories filter narrows every figure", async () => {
    const res = await report({ categories: ["job_management"] });
    expect(res.json).toMatchObject({ total_events: 1, categories: ["job_management"], daily: [{ day: "2011-05-03", events: 1 }], top_actors: [{ user_id: bob.id, events: 1 }] });
  });

  it("csv: one line per figure", async () => {
    const res = await report({ report_type: "device_activity", format: "csv" });
    expect(res.headers.get("Content-Type")).toMatch(/^text\/csv/);
    const lines = res.text.trimEnd().split("\r\n");
    expect(lines[0]).toBe("section,key,detail,events");
    expect(lines).toContain("total,,,3");
    expect(lines).toContain("top_device,POS-1,S-REPORT,2");
    expect(lines).toContain("day,2011-05-03,,2");
  });

  it("refuses bad input with 422 and non-administrators with 403", async () => {
    for (const body of [{ report_type: "everything" }, { format: "pdf" }, { period: { start: "2011-05-04T00:00:00Z", end: "2011-05-01T00:00:00Z" } }, { categories: [] }]) {
      const res = await report(body);
      expect(res.status, JSON.stringify(body)).toBe(422);
    }
    const user = await signup();
    expect((await call("/api/v1/audit/reports", { method: "POST", token: user.token, body: { period } })).status).toBe(403);
  });
});
