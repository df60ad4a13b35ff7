import { describe, expect, it } from "vitest";
import { env } from "cloudflare:workers";
import { SignJWT } from "jose";
import { and, eq, gt, sql } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { summariseApiAccess } from "../../src/services/api-access-summary";
import { UNAUTHORIZED_ACCESS_MAX_PER_WINDOW, UNAUTHORIZED_ACCESS_WINDOW_MS } from "../../src/services/security-events";
import { admin, call, db, signup, unique } from "./helpers";
import { heartbeat, registerDevice, siteWithOperator } from "./device-helpers";

const rowsOf = (eventType: string) => db().select().from(schema.auditLogs).where(eq(schema.auditLogs.eventType, eventType)).all();
const fromSource = async (source: string) =>
  (await rowsOf("unauthorized_access")).filter((r) => (r.eventMetadata as { source?: string }).source === source);

let ipCounter = 1;
/** A client address no other test of this file uses (the per-isolate memory keys on it). */
const freshAddress = () => `198.18.${Math.floor(ipCounter / 250)}.${(ipCounter++ % 250) + 1}`;

async function tokenSignedWith(secret: string, sub: string, issuedAt = Math.floor(Date.now() / 1000)) {
  return new SignJWT({ email: "x@example.com", is_admin: true })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setSubject(sub).setIssuer("fleet-edge").setAudience("fleet-edge-api")
    .setIssuedAt(issuedAt).setExpirationTime(issuedAt + 600)
    .sign(new TextEncoder().encode(secret));
}

describe("login_attempt", () => {
  it("is recorded for every try, before the outcome, whatever the outcome", async () => {
    const user = await signup();
    await call("/api/v1/auth/login", { method: "POST", body: { email: user.email, password: user.password } });
    await call("/api/v1/auth/login", { method: "POST", body: { email: user.email.toUpperCase(), password: "wrong-password" } });
    const attempts = (await rowsOf("login_attempt")).filter((r) => (r.eventMetadata as { email?: string }).email === user.email);
    expect(attempts).toHaveLength(2);
    expect(attempts[0]).toMatchObject({ category: "security_events", severity: "info" });
    expect(JSON.stringify(attempts)).not.toContain("wrong-password");
    // Before the outcome: each attempt's id precedes its success or failure row.
    const success = (await rowsOf("login_success")).find((r) => r.userId === user.id)!;
    const failure = (await rowsOf("login_failed")).find((r) => r.userId === user.id)!;
    expect(attempts[0].id).toBeLessThan(success.id);
    expect(attempts[1].id).toBeLessThan(failure.id);
    expect(attempts[1].id).toBeGreaterThan(success.id);
  });
});

describe("unauthorized_access", () => {
  it("records a token signed with another key, once per source per window", async () => {
    const source = freshAddress();
    const forged = await tokenSignedWith("not-the-service-secret-but-long-enough-0123456789", "1");
    for (let i = 0; i < 3; i++) {
      const res = await call("/api/v1/auth/me", { token: forged, headers: { "CF-Connecting-IP": source } });
      expect(res.status).toBe(401);
    }
    const rows = await fromSource(source);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ category: "security_events", severity: "critical", ipAddress: source });
    expect(rows[0].eventMetadata).toMatchObject({ reason: "forged_token", path: "/api/v1/auth/me", method: "GET" });
  });

  it("records a tampered token (payload changed after signing) and an alg:none token", async () => {
    const user = await signup();
    const [header, payload, signature] = user.token.split(".");
    const claims = JSON.parse(atob(payload.replace(/-/g, "+").replace(/_/g, "/")));
    const raised = btoa(JSON.stringify({ ...claims, is_admin: true, sub: "1" })).replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_");
    const tamperedFrom = freshAddress();
    expect((await call("/api/v1/auth/me", { token: `${header}.${raised}.${signature}`, headers: { "CF-Connecting-IP": tamperedFrom } })).status).toBe(401);
    expect(await fromSource(tamperedFrom)).toHaveLength(1);

    const none = btoa(JSON.stringify({ alg: "none", typ: "JWT" })).replace(/=+$/, "");
    const noneFrom = freshAddress();
    expect((await call("/api/v1/auth/me", { token: `${none}.${payload}.`, headers: { "CF-Connecting-IP": noneFrom } })).status).toBe(401);
    expect(await fromSource(noneFrom)).toHaveLength(1);
  });

  it("does not record an expired token of our own: that is ordinary, not an attack", async () => {
    const user = await signup();
    const source = freshAddress();
    const longAgo = Math.floor(Date.now() / 1000) - 86_400;
    const expired = await tokenSignedWith(env.JWT_SECRET!, String(user.id), longAgo);
    expect((await call("/api/v1/auth/me", { token: expired, headers: { "CF-Connecting-IP": source } })).status).toBe(401);
    expect(await fromSource(source)).toHaveLength(0);
  });

  it("records a device key that fails verification, with the device and its site", async () => {
    const { owner, siteId } = await siteWithOperator();
    const device = await registerDevice(owner.token, siteId);
    const source = freshAddress();
    const res = await call("/api/v1/agent/heartbeat", {
      method: "POST", body: {}, headers: { "X-Device-ID": device.device_id, "X-API-Key": "wrong-key-wrong-key", "CF-Connecting-IP": source },
    });
    expect(res.status).toBe(401);
    const rows = await fromSource(source);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ deviceId: device.device_id, siteId });
    expect(rows[0].eventMetadata).toMatchObject({ reason: "device_key_rejected" });
    // The right key is not an incident.
    expect((await heartbeat(device.device_id, device.api_key)).status).toBe(200);
    expect(await fromSource(source)).toHaveLength(1);
  });

  it("an unknown device id is a plain 401, not an incident", async () => {
    const source = freshAddress();
    const res = await call("/api/v1/agent/heartbeat", {
      method: "POST", body: {}, headers: { "X-Device-ID": unique("NOPE-"), "X-API-Key": "whatever-key", "CF-Connecting-IP": source },
    });
    expect(res.status).toBe(401);
    expect(await fromSource(source)).toHaveLength(0);
  });

  it("holds across isolates: a source already recorded in D1 in the window gets no second row", async () => {
    const source = freshAddress();
    await db().insert(schema.auditLogs).values({
      eventType: "unauthorized_access", category: "security_events", severity: "critical", eventMetadata: { source, reason: "forged_token" },
    });
    const forged = await tokenSignedWith("another-wrong-secret-that-is-long-enough-000000", "1");
    expect((await call("/api/v1/auth/me", { token: forged, headers: { "CF-Connecting-IP": source } })).status).toBe(401);
    expect(await fromSource(source)).toHaveLength(1);
  });

  it("stops at the service-wide cap per window, however many sources attack", async () => {
    const windowStart = new Date(Date.now() - UNAUTHORIZED_ACCESS_WINDOW_MS).toISOString();
    const inWindow = async () => (await db().select({ n: sql<number>`count(*)` }).from(schema.auditLogs)
      .where(and(eq(schema.auditLogs.eventType, "unauthorized_access"), gt(schema.auditLogs.createdAt, windowStart))).get())!.n;
    const missing = UNAUTHORIZED_ACCESS_MAX_PER_WINDOW - (await inWindow());
    for (let i = 0; i < missing; i++) {
      await db().insert(schema.auditLogs).values({
        eventType: "unauthorized_access", category: "security_events", severity: "critical", eventMetadata: { source: `filler-${i}` },
      });
    }
    const source = freshAddress();
    const forged = await tokenSignedWith("yet-another-wrong-secret-long-enough-0000000", "1");
    expect((await call("/api/v1/auth/me", { token: forged, headers: { "CF-Connecting-IP": source } })).status).toBe(401);
    expect(await fromSource(source)).toHaveLength(0);
    expect(await inWindow()).toBe(UNAUTHORIZED_ACCESS_MAX_PER_WINDOW);
  });
});

describe("api_access", () => {
  it("is one row per user per finished hour, with counts, written once however often the cron runs", async () => {
    const alice = await signup();
    const bob = await signup();
    const tag = unique("/acc-");
    const at = (iso: string) => ({ createdAt: iso, responseTimeMs: 1, method: "GET" });
    await db().insert(schema.apiRequestLogs).values([
      { ...at("2021-03-04T08:05:00.000Z"), endpoint: `${tag}/a`, statusCode: 200, userId: alice.id },
      { ...at("2021-03-04T08:15:00.000Z"), endpoint: `${tag}/a`, statusCode: 200, userId: alice.id },
      { ...at("2021-03-04T08:59:59.999Z"), endpoint: `${tag}/b`, statusCode: 404, userId: alice.id },
      { ...at("2021-03-04T08:30:00.000Z"), endpoint: `${tag}/a`, statusCode: 200, userId: bob.id },
      { ...at("2021-03-04T09:10:00.000Z"), endpoint: `${tag}/a`, statusCode: 200, userId: alice.id },
      { ...at("2021-03-04T08:20:00.000Z"), endpoint: `${tag}/a`, statusCode: 200, userId: null },
    ]);
    const summaries = async (userId: number) => (await rowsOf("api_access")).filter((r) => r.userId === userId)
      .map((r) => ({ createdAt: r.createdAt, ...(r.eventMetadata as { hour_start: string; requests: number }) }));

    // 09:01: the 08:00 hour has not settled yet.
    await summariseApiAccess(env.DB, new Date("2021-03-04T09:01:00.000Z"));
    expect(await summaries(alice.id)).toEqual([]);

    await summariseApiAccess(env.DB, new Date("2021-03-04T09:03:00.000Z"));
    await summariseApiAccess(env.DB, new Date("2021-03-04T09:30:00.000Z"));
    expect(await summaries(alice.id)).toEqual([
      { createdAt: "2021-03-04T09:00:00.000Z", user_id: alice.id, hour_start: "2021-03-04T08:00:00.000Z", requests: 3, failed: 1, endpoints: 2 },
    ]);
    expect(await summaries(bob.id)).toHaveLength(1);

    // Catching up after a gap adds the next hour once.
    await summariseApiAccess(env.DB, new Date("2021-03-04T12:00:00.000Z"));
    await summariseApiAccess(env.DB, new Date("2021-03-04T12:01:00.000Z"));
    expect((await summaries(alice.id)).map((s) => [s.hour_start, s.requests])).toEqual([
      ["2021-03-04T08:00:00.000Z", 3], ["2021-03-04T09:00:00.000Z", 1],
    ]);
  });
});

describe("GET /audit/events filters", () => {
  it("metadata.user_id filters on the event's metadata; user_id on the column", async () => {
    const a = await admin();
    const subject = await signup();
    const type = unique("about_user_");
    const recorded = await call("/api/v1/audit/events", { method: "POST", token: a.token, body: { event_type: type, metadata: { user_id: subject.id } } });
    expect(recorded.status).toBe(201);
    await db().insert(schema.auditLogs).values({ eventType: type, category: "business_events", userId: subject.id });

    const byMetadata = await call(`/audit/events?event_type=${type}&metadata.user_id=${subject.id}`, { token: a.token });
    expect(byMetadata.json.events.map((e: { id: number }) => e.id)).toEqual([recorded.json.id]);
    const byColumn = await call(`/api/v1/audit/events?event_type=${type}&user_id=${subject.id}`, { token: a.token });
    expect(byColumn.json.total).toBe(1);
    expect(byColumn.json.events[0].user_id).toBe(subject.id);
    expect((await call(`/api/v1/audit/events?user_id=abc`, { token: a.token })).status).toBe(422);
  });
});
