import { createExecutionContext, createScheduledController, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { and, eq } from "drizzle-orm";
import bcrypt from "bcryptjs";
import { beforeAll, describe, expect, it } from "vitest";
import worker from "../../src/index";
import * as schema from "../../src/db/schema";
import { authenticateDevice } from "../../src/services/device-auth";
import { FAILURES_PER_CLIENT } from "../../src/shared/guard-contract";
import { call, createSite, db, grantSiteRole, signup, unique, type Call } from "./helpers";
import { installWorkerClock } from "./clock";

// Every response body seen in this file, checked at the end for token hashes and their key names.
const seen: { path: string; text: string }[] = [];
async function api(path: string, options: Call = {}) {
  const res = await call(path, options);
  seen.push({ path, text: res.text });
  return res;
}

type User = Awaited<ReturnType<typeof signup>>;
let owner: User;
let operator: User;
let viewer: User;
let outsider: User;
let site: string;
let otherSite: string;

const intentsPath = (siteId: string) => `/api/v1/sites/${siteId}/enrolment-intents`;
const intentPath = (siteId: string, intentId: string) => `${intentsPath(siteId)}/${intentId}`;
const claimPath = (intentId: string) => `/api/v1/enrolment-intents/${intentId}/claim`;

async function newIntent(body: Record<string, unknown> = {}, siteId = site, token = operator.token) {
  const res = await api(intentsPath(siteId), { method: "POST", token, body });
  expect(res.status, res.text).toBe(201);
  return res.json as { intent_id: string; claim_token: string; status: string; expires_at: string; site_id: string };
}

async function setStatus(intentId: string, status: string, siteId = site, token = operator.token) {
  return api(intentPath(siteId, intentId), { method: "PUT", token, body: { status } });
}

async function approvedIntent(body: Record<string, unknown> = {}, siteId = site) {
  const intent = await newIntent(body, siteId);
  const res = await setStatus(intent.intent_id, "approved", siteId);
  expect(res.status, res.text).toBe(200);
  return intent;
}

const claim = (intentId: string, body: Record<string, unknown>) => api(claimPath(intentId), { method: "POST", body });

const intentRow = (intentId: string) =>
  db().select().from(schema.enrolmentIntents).where(eq(schema.enrolmentIntents.intentId, intentId)).get();

const addMember = (siteId: string, user: User, role: string) => grantSiteRole(owner.token, siteId, user, role);

interface LiveMessage { seq: number; type: string; data: any }
const liveEvents = async (siteId: string): Promise<LiveMessage[]> =>
  (await env.SITE_HUB.get(env.SITE_HUB.idFromName(siteId)).eventsSince(siteId, 0)) as unknown as LiveMessage[];

beforeAll(async () => {
  [owner, operator, viewer, outsider] = await Promise.all([signup(), signup(), signup(), signup()]);
  site = await createSite(owner.token);
  otherSite = await createSite(owner.token);
  await addMember(site, operator, "operator");
  await addMember(site, viewer, "viewer");
  await addMember(otherSite, operator, "operator");
});

describe("enrolment intents: management", () => {
  it("creates a pending intent with a one-time token and stores only its bcrypt hash", async () => {
    const before = Date.now();
    const intent = await newIntent({ expected_device_identity: "SN-1234" });
    expect(intent).toMatchObject({ site_id: site, status: "pending", expected_device_identity: "SN-1234", device_id: null, epoch_id: null });
    expect(intent.intent_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(intent.claim_token.length).toBeGreaterThanOrEqual(43);
    const expires = Date.parse(intent.expires_at);
    expect(expires - before).toBeGreaterThanOrEqual(48 * 3_600_000 - 1000);
    expect(expires - Date.now()).toBeLessThanOrEqual(48 * 3_600_000 + 1000);

    const row = await intentRow(intent.intent_id);
    expect(row!.claimTokenHash).not.toContain(intent.claim_token);
    expect(row!.claimTokenHash).toMatch(/^\$2[aby]\$10\$/);
    expect(await bcrypt.compare(intent.claim_token, row!.claimTokenHash)).toBe(true);

    const oneHour = await newIntent({ expires_in_hours: 1 });
    expect(Date.parse(oneHour.expires_at) - Date.now()).toBeLessThanOrEqual(3_600_000 + 1000);
    expect(Date.parse(oneHour.expires_at) - Date.now()).toBeGreaterThan(3_600_000 - 60_000);

    for (const bad of [{ expires_in_hours: 0 }, { expires_in_hours: 8761 }, { expires_in_hours: 2.5 }, { expected_device_identity: "" }]) {
      const res = await api(intentsPath(site), { method: "POST", token: operator.token, body: bad });
      expect(res.status, JSON.stringify(bad)).toBe(422);
    }
    const max = await newIntent({ expires_in_hours: 8760 });
    expect(Date.parse(max.expires_at) - Date.now()).toBeGreaterThan(8759 * 3_600_000);

    const audit = await db().select().from(schema.auditLogs)
      .where(and(eq(schema.auditLogs.eventType, "enrolment_intent_created"), eq(schema.auditLogs.siteId, site))).all();
    expect(audit.some((a) => (a.eventMetadata as any).intent_id === intent.intent_id && a.userId === operator.id)).toBe(true);
  });

  it("gets and lists intents (viewer may read), filtered by status and paged, newest first", async () => {
    const listSite = await createSite(owner.token);
    await addMember(listSite, operator, "operator");
    await addMember(listSite, viewer, "viewer");
    const a = await newIntent({}, listSite);
    const b = await newIntent({}, listSite);
    const c = await newIntent({}, listSite);
    expect((await setStatus(b.intent_id, "approved", listSite)).status).toBe(200);

    const all = await api(intentsPath(listSite), { token: viewer.token });
    expect(all.status).toBe(200);
    expect(all.json.total).toBe(3);
    expect(all.json.intents.map((i: any) => i.intent_id)).toEqual([c.intent_id, b.intent_id, a.intent_id]);
    for (const i of all.json.intents) expect(i).not.toHaveProperty("claim_token");

    const approved = await api(`${intentsPath(listSite)}?status=approved`, { token: viewer.token });
    expect(approved.json).toMatchObject({ total: 1, intents: [{ intent_id: b.intent_id, status: "approved" }] });

    const page = await api(`${intentsPath(listSite)}?limit=1&offset=1`, { token: viewer.token });
    expect(page.json.total).toBe(3);
    expect(page.json.intents.map((i: any) => i.intent_id)).toEqual([b.intent_id]);

    expect((await api(`${intentsPath(listSite)}?status=bogus`, { token: viewer.token })).status).toBe(422);
    expect((await api(`${intentsPath(listSite)}?limit=501`, { token: viewer.token })).status).toBe(422);

    const one = await api(intentPath(listSite, a.intent_id), { token: viewer.token });
    expect(one.status).toBe(200);
    expect(one.json).toMatchObject({ intent_id: a.intent_id, site_id: listSite, status: "pending", expires_at: a.expires_at });
    expect(one.json).not.toHaveProperty("claim_token");
    expect(Object.keys(one.json).sort()).toEqual([
      "claimed_at", "created_at", "created_by", "device_id", "epoch_id", "expected_device_identity",
      "expires_at", "idempotency_key", "intent_id", "site_id", "status", "updated_at",
    ]);
  });

  it("enforces authentication, roles and site scoping (401 / 403 / 404)", async () => {
    const intent = await newIntent();
    const foreign = await newIntent({}, otherSite);
    const id = intent.intent_id;

    // Unauthenticated: 401 on every management call.
    for (const [method, path, body] of [
      ["POST", intentsPath(site), {}],
      ["GET", intentsPath(site), undefined],
      ["GET", intentPath(site, id), undefined],
      ["PUT", intentPath(site, id), { status: "approved" }],
      ["POST", `${intentPath(site, id)}/regenerate-token`, undefined],
      ["POST", `${intentPath(site, id)}/revoke`, undefined],
    ] as const) {
      const res = await api(path, { method, body });
      expect(res.status, `${method} ${path}`).toBe(401);
    }

    // Viewer: reads yes, writes 403.
    expect((await api(intentPath(site, id), { token: viewer.token })).status).toBe(200);
    expect((await api(intentsPath(site), { method: "POST", token: viewer.token, body: {} })).status).toBe(403);
    expect((await setStatus(id, "approved", site, viewer.token)).status).toBe(403);
    expect((await api(`${intentPath(site, id)}/regenerate-token`, { method: "POST", token: viewer.token })).status).toBe(403);
    expect((await api(`${intentPath(site, id)}/revoke`, { method: "POST", token: viewer.token })).status).toBe(403);
    expect((await intentRow(id))!.status).toBe("pending");

    // No access to the site at all: 403 even for reads.
    expect((await api(intentsPath(site), { token: outsider.token })).status).toBe(403);
    expect((await api(intentPath(site, id), { token: outsider.token })).status).toBe(403);
    expect((await api(intentsPath(site), { method: "POST", token: outsider.token, body: {} })).status).toBe(403);

    // Unknown site and unknown intent: 404.
    const ghostSite = unique("NOSITE-");
    expect((await api(intentsPath(ghostSite), { token: operator.token })).status).toBe(404);
    expect((await api(intentsPath(ghostSite), { method: "POST", token: operator.token, body: {} })).status).toBe(404);
    const ghost = crypto.randomUUID();
    expect((await api(intentPath(site, ghost), { token: operator.token })).status).toBe(404);
    expect((await setStatus(ghost, "approved")).status).toBe(404);
    expect((await api(`${intentPath(site, ghost)}/regenerate-token`, { method: "POST", token: operator.token })).status).toBe(404);
    expect((await api(`${intentPath(site, ghost)}/revoke`, { method: "POST", token: operator.token })).status).toBe(404);

    // Another site's intent under this site's path: 404, and it is left untouched.
    const fid = foreign.intent_id;
    expect((await api(intentPath(site, fid), { token: operator.token })).status).toBe(404);
    expect((await setStatus(fid, "approved")).status).toBe(404);
    expect((await api(`${intentPath(site, fid)}/regenerate-token`, { method: "POST", token: operator.token })).status).toBe(404);
    expect((await api(`${intentPath(site, fid)}/revoke`, { method: "POST", token: operator.token })).status).toBe(404);
    expect((await intentRow(fid))!.status).toBe("pending");
    expect((await api(intentPath(otherSite, fid), { token: operator.token })).status).toBe(200);

    // Only approved, rejected or revoked may be set.
    expect((await setStatus(id, "consumed")).status).toBe(422);
    expect((await setStatus(id, "pending")).status).toBe(422);
  });

  it("approves, rejects and revokes only from pending; approved intents are revoked through POST .../revoke", async () => {
    const a = await newIntent();
    const approved = await setStatus(a.intent_id, "approved");
    expect(approved.status).toBe(200);
    expect(approved.json).toMatchObject({ intent_id: a.intent_id, status: "approved" });

    // The specification: a change from approved (e.g. to revoked) is 400.
    for (const status of ["revoked", "rejected", "approved"]) {
      const res = await setStatus(a.intent_id, status);
      expect(res.status, status).toBe(400);
      expect(res.json.detail).toMatch(/pending/);
    }
    expect((await intentRow(a.intent_id))!.status).toBe("approved");

    const revoked = await api(`${intentPath(site, a.intent_id)}/revoke`, { method: "POST", token: operator.token });
    expect(revoked.status).toBe(200);
    expect(revoked.json.status).toBe("revoked");
    expect((await api(`${intentPath(site, a.intent_id)}/revoke`, { method: "POST", token: operator.token })).status).toBe(400);
    expect((await setStatus(a.intent_id, "approved")).status).toBe(400);

    const r = await newIntent();
    const rejected = await setStatus(r.intent_id, "rejected");
    expect(rejected.json.status).toBe("rejected");
    expect((await setStatus(r.intent_id, "approved")).status).toBe(400);
    expect((await api(`${intentPath(site, r.intent_id)}/revoke`, { method: "POST", token: operator.token })).status).toBe(400);

    const p = await newIntent();
    expect((await setStatus(p.intent_id, "revoked")).json.status).toBe("revoked");
    const pr = await newIntent();
    expect((await api(`${intentPath(site, pr.intent_id)}/revoke`, { method: "POST", token: operator.token })).json.status).toBe("revoked");

    // Each transition is audited with the acting user.
    const audit = await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.siteId, site)).all();
    const about = (id: string) => audit.filter((e) => (e.eventMetadata as any)?.intent_id === id).map((e) => e.eventType);
    expect(about(a.intent_id)).toEqual(expect.arrayContaining(["enrolment_intent_created", "enrolment_intent_approved", "enrolment_intent_revoked"]));
    expect(about(r.intent_id)).toContain("enrolment_intent_rejected");
    expect(about(a.intent_id).filter((t) => t === "enrolment_intent_revoked")).toHaveLength(1);
  });

  it("regenerates the token of pending and approved intents; the old token dies at once", async () => {
    const intent = await newIntent();
    const regen = await api(`${intentPath(site, intent.intent_id)}/regenerate-token`, { method: "POST", token: operator.token });
    expect(regen.status).toBe(200);
    expect(regen.json).toMatchObject({ intent_id: intent.intent_id, status: "pending", expires_at: intent.expires_at });
    expect(regen.json.claim_token).not.toBe(intent.claim_token);

    expect((await setStatus(intent.intent_id, "approved")).status).toBe(200);
    const regen2 = await api(`${intentPath(site, intent.intent_id)}/regenerate-token`, { method: "POST", token: operator.token });
    expect(regen2.status).toBe(200);
    expect(regen2.json.status).toBe("approved");
    const current = regen2.json.claim_token as string;
    expect(new Set([intent.claim_token, regen.json.claim_token, current]).size).toBe(3);

    for (const stale of [intent.claim_token, regen.json.claim_token]) {
      const res = await claim(intent.intent_id, { claim_token: stale });
      expect(res.status).toBe(400);
      expect(res.json.detail).toBe("Invalid enrolment intent or claim token");
    }
    const ok = await claim(intent.intent_id, { claim_token: current });
    expect(ok.status, ok.text).toBe(201);

    // Consumed (and rejected) intents get no new token.
    expect((await api(`${intentPath(site, intent.intent_id)}/regenerate-token`, { method: "POST", token: operator.token })).status).toBe(400);
    const rejected = await newIntent();
    await setStatus(rejected.intent_id, "rejected");
    expect((await api(`${intentPath(site, rejected.intent_id)}/regenerate-token`, { method: "POST", token: operator.token })).status).toBe(400);
  });

  it("idempotency key: same body → the same intent without a token; different body → 422", async () => {
    const key = unique("idem-");
    const body = { expected_device_identity: "SN-IDEM", expires_in_hours: 24, idempotency_key: key };
    const first = await api(intentsPath(site), { method: "POST", token: operator.token, body });
    expect(first.status).toBe(201);
    expect(first.json.claim_token).toBeTruthy();

    const again = await api(intentsPath(site), { method: "POST", token: operator.token, body });
    expect(again.status).toBe(200);
    expect(again.json.intent_id).toBe(first.json.intent_id);
    expect(again.json.idempotency_key).toBe(key);
    expect(again.json).not.toHaveProperty("claim_token");

    const different = await api(intentsPath(site), { method: "POST", token: operator.token, body: { ...body, expires_in_hours: 25 } });
    expect(different.status).toBe(422);
    expect(JSON.stringify(different.json.detail)).toContain("idempotency_key");

    // The default lifetime is part of the body: omitting it equals sending 48.
    const k2 = unique("idem-");
    const d1 = await api(intentsPath(site), { method: "POST", token: operator.token, body: { idempotency_key: k2 } });
    const d2 = await api(intentsPath(site), { method: "POST", token: operator.token, body: { idempotency_key: k2, expires_in_hours: 48 } });
    expect([d1.status, d2.status]).toEqual([201, 200]);
    expect(d2.json.intent_id).toBe(d1.json.intent_id);

    // Keys are per site.
    const elsewhere = await api(intentsPath(otherSite), { method: "POST", token: operator.token, body });
    expect(elsewhere.status).toBe(201);
    expect(elsewhere.json.intent_id).not.toBe(first.json.intent_id);

    // Concurrent retries with one key create one intent.
    const k3 = unique("idem-");
    const burst = await Promise.all(Array.from({ length: 5 }, () =>
      api(intentsPath(site), { method: "POST", token: operator.token, body: { idempotency_key: k3 } })));
    expect(burst.filter((r) => r.status === 201)).toHaveLength(1);
    expect(burst.filter((r) => r.status === 200)).toHaveLength(4);
    expect(new Set(burst.map((r) => r.json.intent_id)).size).toBe(1);
    const rows = await db().select().from(schema.enrolmentIntents)
      .where(and(eq(schema.enrolmentIntents.siteId, site), eq(schema.enrolmentIntents.idempotencyKey, k3))).all();
    expect(rows).toHaveLength(1);
  });
});

describe("enrolment intents: claim", () => {
  it("claims an approved intent: device, epoch and api_key in one step; the device then authenticates", async () => {
    const claimSite = await createSite(owner.token);
    await addMember(claimSite, operator, "operator");
    const intent = await approvedIntent({ expected_device_identity: "SN-HAPPY-1" }, claimSite);

    const res = await claim(intent.intent_id, { claim_token: intent.claim_token, device_identity: "SN-HAPPY-1", device_name: "Till 1", device_type: "kiosk" });
    expect(res.status, res.text).toBe(201);
    expect(Object.keys(res.json).sort()).toEqual(["api_key", "data", "device_id", "epoch_id", "message", "site_id", "status"]);
    const { api_key, device_id, epoch_id, site_id } = res.json;
    expect(site_id).toBe(claimSite);
    expect(device_id).toMatch(/^DEVICE-/);
    expect(epoch_id).toMatch(/^[0-9a-f-]{36}$/);

    // The device authenticates with the returned key, and only with it.
    expect((await authenticateDevice(env, db(), device_id, api_key)).device).toEqual({ deviceId: device_id, siteId: claimSite });
    await expect(authenticateDevice(env, db(), device_id, intent.claim_token)).rejects.toMatchObject({ status: 401 });

    const device = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, device_id)).get();
    expect(device).toMatchObject({ siteId: claimSite, name: "Till 1", deviceType: "kiosk", enrollmentMethod: "pre-provisioned", lifecycleState: "active" });
    expect(device!.apiKeyHash).not.toContain(api_key);
    expect(await bcrypt.compare(api_key, device!.apiKeyHash!)).toBe(true);

    const epochs = await db().select().from(schema.lifecycleEpochs).where(eq(schema.lifecycleEpochs.intentId, intent.intent_id)).all();
    expect(epochs).toHaveLength(1);
    expect(epochs[0]).toMatchObject({ epochId: epoch_id, deviceId: device_id, siteId: claimSite, enrollmentMethod: "pre-provisioned", endedAt: null });

    const row = await intentRow(intent.intent_id);
    expect(row).toMatchObject({ status: "consumed", deviceId: device_id, epochId: epoch_id });
    expect(row!.claimedAt).toBeTruthy();

    // ...and over HTTP: a heartbeat with the returned credentials is accepted, a wrong key is not.
    const beat = await api("/api/v1/agent/heartbeat", { method: "POST", body: {}, headers: { "X-Device-ID": device_id, "X-API-Key": api_key } });
    expect(beat.status, beat.text).toBe(200);
    expect(beat.json.device_id).toBe(device_id);
    const badBeat = await api("/api/v1/agent/heartbeat", { method: "POST", body: {}, headers: { "X-Device-ID": device_id, "X-API-Key": intent.claim_token } });
    expect(badBeat.status).toBe(401);

    // It is in the site's device list and stats at once.
    const list = await api(`/api/v1/devices/sites/${claimSite}/devices`, { token: owner.token });
    expect(list.status, list.text).toBe(200);
    expect(list.json).toEqual([expect.objectContaining({ device_id, name: "Till 1", enrollment_method: "pre-provisioned" })]);
    const stats = await api(`/api/v1/sites/${claimSite}/stats`, { token: owner.token });
    expect(stats.status, stats.text).toBe(200);
    expect(stats.json.total_devices).toBe(1);
    expect(stats.json.by_enrollment_method["pre-provisioned"]).toBe(1);
    const health = await api(`/api/v1/sites/${claimSite}/health`, { token: owner.token });
    expect(health.status).toBe(200);
    expect(health.json.devices.map((d: any) => d.device_id)).toContain(device_id);

    // Operators see the consumed intent with its device.
    const detail = await api(intentPath(claimSite, intent.intent_id), { token: operator.token });
    expect(detail.json).toMatchObject({ status: "consumed", device_id, epoch_id });

    // Audited, and every transition went to the site's live channel.
    const audit = await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.siteId, claimSite)).all();
    expect(audit.filter((e) => e.eventType === "device_registered" && e.deviceId === device_id)).toHaveLength(1);
    expect(audit.filter((e) => e.eventType === "enrolment_intent_consumed" && e.deviceId === device_id)).toHaveLength(1);

    const events = (await liveEvents(claimSite)).filter((e) => e.type === "intent.updated");
    expect(events.map((e) => (e.data as any).status)).toEqual(["pending", "approved", "consumed"]);
    expect(events[2].data).toMatchObject({ intent_id: intent.intent_id, device_id, epoch_id, previous_status: "approved" });
    const stored = row!.claimTokenHash;
    for (const e of events) {
      expect(JSON.stringify(e)).not.toContain(stored);
      expect(JSON.stringify(e)).not.toContain("claim_token");
    }

    // A consumed intent cannot be claimed again, not even with its token.
    const again = await claim(intent.intent_id, { claim_token: intent.claim_token, device_identity: "SN-HAPPY-1" });
    expect(again.status).toBe(400);
    expect(again.json.detail).toBe("Enrolment intent has already been claimed");
    expect(await db().select().from(schema.devices).where(eq(schema.devices.siteId, claimSite)).all()).toHaveLength(1);
  });

  it("refuses claims of pending, rejected, revoked, expired and consumed intents with 400 and a reason", async () => {
    const pending = await newIntent();
    const res1 = await claim(pending.intent_id, { claim_token: pending.claim_token });
    expect(res1.status).toBe(400);
    expect(res1.json.detail).toBe("Enrolment intent is not approved yet");

    const rejected = await newIntent();
    await setStatus(rejected.intent_id, "rejected");
    const res2 = await claim(rejected.intent_id, { claim_token: rejected.claim_token });
    expect([res2.status, res2.json.detail]).toEqual([400, "Enrolment intent was rejected"]);

    const revokedPending = await newIntent();
    await setStatus(revokedPending.intent_id, "revoked");
    const res3 = await claim(revokedPending.intent_id, { claim_token: revokedPending.claim_token });
    expect([res3.status, res3.json.detail]).toEqual([400, "Enrolment intent was revoked"]);

    const revokedApproved = await approvedIntent();
    await api(`${intentPath(site, revokedApproved.intent_id)}/revoke`, { method: "POST", token: operator.token });
    const res4 = await claim(revokedApproved.intent_id, { claim_token: revokedApproved.claim_token });
    expect([res4.status, res4.json.detail]).toEqual([400, "Enrolment intent was revoked"]);

    // Expired by time, before any sweep ran: the claim enforces expiry itself (and records it).
    const expired = await approvedIntent();
    const clock = installWorkerClock();
    clock.advance(48 * 3_600_000 + 1_000);
    const res5 = await claim(expired.intent_id, { claim_token: expired.claim_token }).finally(clock.restore);
    expect([res5.status, res5.json.detail]).toEqual([400, "Enrolment intent has expired"]);
    expect((await intentRow(expired.intent_id))!.status).toBe("expired");
    expect((await setStatus(expired.intent_id, "revoked")).status).toBe(400);

    // A pending intent past its time cannot be approved either.
    const late = await newIntent();
    await db().update(schema.enrolmentIntents).set({ expiresAt: new Date(Date.now() - 1000).toISOString() })
      .where(eq(schema.enrolmentIntents.intentId, late.intent_id));
    const approveLate = await setStatus(late.intent_id, "approved");
    expect(approveLate.status).toBe(400);
    expect(approveLate.json.detail).toMatch(/expired/);

    const consumed = await approvedIntent();
    expect((await claim(consumed.intent_id, { claim_token: consumed.claim_token })).status).toBe(201);
    const res6 = await claim(consumed.intent_id, { claim_token: consumed.claim_token });
    expect([res6.status, res6.json.detail]).toEqual([400, "Enrolment intent has already been claimed"]);

    // None of these created a device.
    for (const i of [pending, rejected, revokedPending, revokedApproved, expired]) {
      expect(await db().select().from(schema.lifecycleEpochs).where(eq(schema.lifecycleEpochs.intentId, i.intent_id)).all()).toHaveLength(0);
    }
  });

  it("a wrong token and an unknown intent get the same 400; identity must match when expected", async () => {
    const intent = await approvedIntent({ expected_device_identity: "SN-EXPECTED" });
    const wrong = await claim(intent.intent_id, { claim_token: "not-the-token", device_identity: "SN-EXPECTED" });
    const unknown = await claim(crypto.randomUUID(), { claim_token: intent.claim_token, device_identity: "SN-EXPECTED" });
    const notUuid = await claim("nonsense", { claim_token: "x" });
    const long = await claim(intent.intent_id, { claim_token: `${intent.claim_token}${"é".repeat(200)}`, device_identity: "SN-EXPECTED" });
    for (const res of [wrong, unknown, notUuid, long]) {
      expect(res.status).toBe(400);
      expect(res.json).toEqual({ detail: "Invalid enrolment intent or claim token" });
    }
    // The right token for another intent is just a wrong token here.
    const other = await approvedIntent();
    const crossed = await claim(intent.intent_id, { claim_token: other.claim_token, device_identity: "SN-EXPECTED" });
    expect(crossed.json).toEqual(wrong.json);

    const mismatch = await claim(intent.intent_id, { claim_token: intent.claim_token, device_identity: "SN-OTHER" });
    expect([mismatch.status, mismatch.json.detail]).toEqual([400, "Device identity does not match the enrolment intent"]);
    const missing = await claim(intent.intent_id, { claim_token: intent.claim_token });
    expect([missing.status, missing.json.detail]).toEqual([400, "Device identity does not match the enrolment intent"]);
    expect((await intentRow(intent.intent_id))!.status).toBe("approved");

    const ok = await claim(intent.intent_id, { claim_token: intent.claim_token, device_identity: "SN-EXPECTED" });
    expect(ok.status, ok.text).toBe(201);
    const device = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, ok.json.device_id)).get();
    expect(device!.name).toBe("SN-EXPECTED");

    // Device names are unique in a site: a taken device_name is refused (to the token holder), a taken
    // identity-derived name falls back to the generated device id.
    const second = await approvedIntent({ expected_device_identity: "SN-EXPECTED" });
    const taken = await claim(second.intent_id, { claim_token: second.claim_token, device_identity: "SN-EXPECTED", device_name: "SN-EXPECTED" });
    expect([taken.status, taken.json.detail]).toEqual([400, "A device named 'SN-EXPECTED' already exists in this site"]);
    expect((await intentRow(second.intent_id))!.status).toBe("approved");
    const fallback = await claim(second.intent_id, { claim_token: second.claim_token, device_identity: "SN-EXPECTED" });
    expect(fallback.status, fallback.text).toBe(201);
    const fallbackDevice = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, fallback.json.device_id)).get();
    expect(fallbackDevice!.name).toBe(fallback.json.device_id);

    // Malformed bodies are validation errors, not claims.
    expect((await api(claimPath(intent.intent_id), { method: "POST", body: {} })).status).toBe(422);
    expect((await api(claimPath(intent.intent_id), { method: "POST", rawBody: "{" })).status).toBe(400);

    // Failed claims of an existing intent are audited for its site; nothing is recorded for unknown ids.
    const failures = await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.eventType, "enrolment_claim_failed")).all();
    expect(failures.filter((e) => (e.eventMetadata as any).intent_id === intent.intent_id).length).toBeGreaterThanOrEqual(4);
    expect(failures.every((e) => e.siteId !== null)).toBe(true);
  });

  it("throttles failed claims per intent id and client address, for unknown ids too, and a third party cannot block the claim", async () => {
    const intent = await approvedIntent();
    const from = (address: string) => ({ "CF-Connecting-IP": address });
    const claimFrom = (address: string, intentId: string, body: Record<string, unknown>) =>
      api(claimPath(intentId), { method: "POST", body, headers: from(address) });

    // Two attackers fail 5 times each: then each of them waits, with nothing checked.
    for (const attacker of ["198.51.100.10", "198.51.100.11"]) {
      for (let i = 0; i < FAILURES_PER_CLIENT; i++) expect((await claimFrom(attacker, intent.intent_id, { claim_token: `wrong-${i}` })).status).toBe(400);
      const limited = await claimFrom(attacker, intent.intent_id, { claim_token: `wrong-again` });
      expect(limited.status).toBe(429);
      expect(limited.json.detail).toBe("Too many failed claim attempts for this enrolment intent; try again later");
      expect(Number(limited.headers.get("Retry-After"))).toBeGreaterThan(800);
      expect(Number(limited.headers.get("Retry-After"))).toBeLessThanOrEqual(900);
    }
    // Even the right token from an attacker's address waits: that address has been failing.
    expect((await claimFrom("198.51.100.10", intent.intent_id, { claim_token: intent.claim_token })).status).toBe(429);
    expect((await intentRow(intent.intent_id))!.status).toBe("approved");

    // An unknown id behaves exactly alike, so a 429 says nothing about existence either.
    const ghost = crypto.randomUUID();
    for (let i = 0; i < FAILURES_PER_CLIENT; i++) expect((await claimFrom("198.51.100.10", ghost, { claim_token: `wrong-${i}` })).status).toBe(400);
    const ghostLimited = await claimFrom("198.51.100.10", ghost, { claim_token: "x" });
    expect(ghostLimited.status).toBe(429);
    expect(ghostLimited.json.detail).toBe("Too many failed claim attempts for this enrolment intent; try again later");

    // The installer, from an address that has not failed, claims it (20 failed or refused attempts did not block it).
    const installed = await claimFrom("203.0.113.20", intent.intent_id, { claim_token: intent.claim_token });
    expect(installed.status, installed.text).toBe(201);
  });

  it("50 concurrent claims of one token: exactly one success, one device, one epoch", { timeout: 180_000 }, async () => {
    const raceSite = await createSite(owner.token);
    await addMember(raceSite, operator, "operator");
    const intent = await approvedIntent({}, raceSite);

    const results = await Promise.all(Array.from({ length: 50 }, (_, i) =>
      claim(intent.intent_id, { claim_token: intent.claim_token, device_name: `racer-${i}` })));
    const winners = results.filter((r) => r.status === 201);
    expect(winners).toHaveLength(1);
    const losers = results.filter((r) => r.status !== 201);
    expect(losers).toHaveLength(49);
    for (const r of losers) expect([400, 429]).toContain(r.status);
    expect(losers.filter((r) => r.status === 400).every((r) => r.json.detail === "Enrolment intent has already been claimed")).toBe(true);

    const { device_id, epoch_id } = winners[0].json;
    const siteDevices = await db().select().from(schema.devices).where(eq(schema.devices.siteId, raceSite)).all();
    expect(siteDevices.map((d) => d.deviceId)).toEqual([device_id]);
    const epochs = await db().select().from(schema.lifecycleEpochs).where(eq(schema.lifecycleEpochs.siteId, raceSite)).all();
    expect(epochs.map((e) => e.epochId)).toEqual([epoch_id]);
    expect(await intentRow(intent.intent_id)).toMatchObject({ status: "consumed", deviceId: device_id, epochId: epoch_id });
    const registered = await db().select().from(schema.auditLogs)
      .where(and(eq(schema.auditLogs.siteId, raceSite), eq(schema.auditLogs.eventType, "device_registered"))).all();
    expect(registered).toHaveLength(1);
    expect((await authenticateDevice(env, db(), device_id, winners[0].json.api_key)).device).toMatchObject({ deviceId: device_id });
  });
});

describe("enrolment intents: expiry sweep", () => {
  async function runCron(at = Date.now()) {
    const ctx = createExecutionContext();
    await worker.scheduled(createScheduledController({ scheduledTime: at, cron: "* * * * *" }), env, ctx);
    await waitOnExecutionContext(ctx);
  }

  it("the scheduled handler expires due pending/approved intents idempotently, and a late claim fails", async () => {
    const sweepSite = await createSite(owner.token);
    await addMember(sweepSite, operator, "operator");
    const duePending = await newIntent({}, sweepSite);
    const dueApproved = await approvedIntent({}, sweepSite);
    const fresh = await approvedIntent({}, sweepSite);
    const dueRejected = await newIntent({}, sweepSite);
    await setStatus(dueRejected.intent_id, "rejected", sweepSite);
    const past = new Date(Date.now() - 60_000).toISOString();
    for (const i of [duePending, dueApproved, dueRejected]) {
      await db().update(schema.enrolmentIntents).set({ expiresAt: past }).where(eq(schema.enrolmentIntents.intentId, i.intent_id));
    }

    await runCron();
    expect((await intentRow(duePending.intent_id))!.status).toBe("expired");
    expect((await intentRow(dueApproved.intent_id))!.status).toBe("expired");
    expect((await intentRow(fresh.intent_id))!.status).toBe("approved");
    expect((await intentRow(dueRejected.intent_id))!.status).toBe("rejected");

    const expiredAudit = async () => (await db().select().from(schema.auditLogs)
      .where(and(eq(schema.auditLogs.siteId, sweepSite), eq(schema.auditLogs.eventType, "enrolment_intent_expired"))).all())
      .map((e) => e.eventMetadata as any);
    const first = await expiredAudit();
    expect(first.map((m) => m.intent_id).sort()).toEqual([duePending.intent_id, dueApproved.intent_id].sort());
    expect(first.find((m) => m.intent_id === dueApproved.intent_id).previous_status).toBe("approved");

    // Idempotent: a second run changes and records nothing.
    await runCron();
    expect(await expiredAudit()).toHaveLength(2);
    const events = (await liveEvents(sweepSite)).filter((e) => e.type === "intent.updated" && (e.data as any).status === "expired");
    expect(events.map((e) => (e.data as any).intent_id).sort()).toEqual([duePending.intent_id, dueApproved.intent_id].sort());

    const lateClaim = await claim(dueApproved.intent_id, { claim_token: dueApproved.claim_token });
    expect([lateClaim.status, lateClaim.json.detail]).toEqual([400, "Enrolment intent has expired"]);
    expect((await api(`${intentPath(sweepSite, dueApproved.intent_id)}/regenerate-token`, { method: "POST", token: operator.token })).status).toBe(400);
    expect(await db().select().from(schema.devices).where(eq(schema.devices.siteId, sweepSite)).all()).toHaveLength(0);

  });
});

describe("enrolment intents: secrecy", () => {
  it("never returns a token hash in any response", async () => {
    const hashes = (await db().select({ h: schema.enrolmentIntents.claimTokenHash }).from(schema.enrolmentIntents).all()).map((r) => r.h);
    const deviceHashes = (await db().select({ h: schema.devices.apiKeyHash }).from(schema.devices).all()).map((r) => r.h).filter(Boolean) as string[];
    expect(hashes.length).toBeGreaterThan(20);
    expect(seen.length).toBeGreaterThan(100);
    for (const { path, text } of seen) {
      for (const h of [...hashes, ...deviceHashes]) expect(text.includes(h), `${path} leaks a hash`).toBe(false);
      expect(text, path).not.toMatch(/claim_token_hash|claimTokenHash|api_key_hash|apiKeyHash|\$2[aby]\$/);
    }
    const doc = await call("/openapi.json");
    expect(doc.text).not.toMatch(/claim_token_hash/);
  });
});
