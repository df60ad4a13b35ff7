import { describe, expect, it } from "vitest";
import { env, runInDurableObject } from "cloudflare:test";
import { asc, eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { auditStream } from "../../src/hub/audit-stream";
import type { AuditStream } from "../../durable-objects/audit-stream";
import { AUDIT_STREAM_NAME } from "../../src/shared/audit-stream-contract";
import { GENESIS_HASH, canonicalAuditEvent, chainHash } from "../../src/shared/audit-chain";
import { chainedFieldsOf } from "../../src/shared/audit-view";
import { admin, call, createSite, db, eventually, grantSiteRole, signup, unique } from "./helpers";
import { syncLiveAccess } from "../../src/services/live-access";
import { heartbeat, registerDevice } from "./device-helpers";
import { runCron } from "./commands-helpers";
import { openStream } from "./live-helpers";

type StreamedEvent = { id: number; event_type: string; site_id: string | null; hash: string | null; prev_hash: string | null };

const nudge = () => auditStream(env).nudge();
const record = async (token: string, body: Record<string, unknown>) => {
  const res = await call("/api/v1/audit/events", { method: "POST", token, body });
  if (res.status !== 201) throw new Error(`record failed: ${res.status} ${res.text}`);
  return res.json as { id: number };
};
const rowsOfSite = (siteId: string) => db().select().from(schema.auditLogs).where(eq(schema.auditLogs.siteId, siteId)).orderBy(asc(schema.auditLogs.id)).all();
const verify = async (token: string, query: string) => (await call(`/api/v1/audit/verify?${query}`, { token })).json;

/** The `id:` of every frame so far, and its parsed data. */
const framesOf = (text: string) => text.split("\n\n").filter((f) => f.startsWith("id: ")).map((f) => {
  const [idLine, dataLine] = f.split("\n");
  return { id: Number(idLine.slice(4)), event: JSON.parse(dataLine.slice(6)) as StreamedEvent };
});

describe("hash chain", () => {
  it("seals each site's events into a chain, in id order, from the genesis hash", async () => {
    const a = await admin();
    const siteId = await createSite(a.token);
    for (let i = 0; i < 3; i++) await record(a.token, { event_type: "transaction_processed", site_id: siteId, metadata: { n: i, nested: { b: 1, a: 2 } } });
    const reply = await nudge();
    const rows = await rowsOfSite(siteId);
    expect(rows.length).toBe(4); // site_created + 3
    expect(reply.sealed_through).toBeGreaterThanOrEqual(rows[3].id);
    let prev = GENESIS_HASH;
    for (const row of rows) {
      expect(row.prevHash).toBe(prev);
      expect(row.hash).toBe(await chainHash(prev, canonicalAuditEvent(chainedFieldsOf(row))));
      prev = row.hash!;
    }
    const result = await verify(a.token, `site_id=${siteId}`);
    expect(result).toMatchObject({ ok: true, checked: 4, sealed: 4, unsealed: 0, broken_at: null, anchor: { id: rows[0].id, prev_hash: GENESIS_HASH } });
    // The events API shows the links.
    const listed = (await call(`/audit/events?event_type=site_created&limit=500`, { token: a.token })).json.events.find((e: StreamedEvent) => e.site_id === siteId);
    expect(listed).toMatchObject({ prev_hash: GENESIS_HASH, hash: rows[0].hash });
  });

  it("verify finds a changed row, a removed row and a removed seal at that row", async () => {
    const a = await admin();
    const cases = ["changed", "removed", "unsealed"] as const;
    for (const tampering of cases) {
      const siteId = await createSite(a.token);
      for (let i = 0; i < 4; i++) await record(a.token, { event_type: "transaction_processed", site_id: siteId, metadata: { n: i } });
      await nudge();
      const rows = await rowsOfSite(siteId);
      const victim = rows[2];
      if (tampering === "changed") {
        await db().update(schema.auditLogs).set({ eventMetadata: { n: 99 } }).where(eq(schema.auditLogs.id, victim.id));
      } else if (tampering === "removed") {
        await db().delete(schema.auditLogs).where(eq(schema.auditLogs.id, victim.id));
      } else {
        await db().update(schema.auditLogs).set({ hash: null, prevHash: null }).where(eq(schema.auditLogs.id, victim.id));
      }
      const result = await verify(a.token, `site_id=${siteId}`);
      expect(result.ok, tampering).toBe(false);
      expect(result.broken_at, tampering).toEqual({
        changed: { id: victim.id, reason: "hash_mismatch" },
        removed: { id: rows[3].id, reason: "prev_hash_mismatch" },
        unsealed: { id: victim.id, reason: "seal_missing" },
      }[tampering]);
    }
  });

  it("keeps the service-wide chain for events without a site, and reports rows not sealed yet", async () => {
    const a = await admin();
    await nudge();
    const type = unique("unsited_");
    await db().insert(schema.auditLogs).values({ eventType: type, category: "business_events" });
    const before = await verify(a.token, "");
    expect(before.ok).toBe(true);
    expect(before.unsealed).toBeGreaterThanOrEqual(1);
    expect(before.first_unsealed_id).not.toBeNull();
    await nudge();
    const after = await verify(a.token, "");
    expect(after).toMatchObject({ ok: true, unsealed: 0, site_id: null });
    const row = (await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.eventType, type)).get())!;
    expect(row.hash).toMatch(/^[0-9a-f]{64}$/);
  });

  it("seals, for every one of many concurrent nudges, every row inserted before it", async () => {
    const type = unique("burst_");
    const nudges: { before: number; reply: Promise<{ sealed_through: number }> }[] = [];
    for (let i = 0; i < 8; i++) {
      const [row] = await db().insert(schema.auditLogs).values({ eventType: type, category: "business_events" }).returning();
      nudges.push({ before: row.id, reply: nudge() });
    }
    for (const { before, reply } of nudges) expect((await reply).sealed_through).toBeGreaterThanOrEqual(before);
    const rows = await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.eventType, type)).all();
    expect(rows.every((r) => r.hash !== null)).toBe(true);
  });

  it("is administrators' only, and refuses bad input with 422", async () => {
    const user = await signup();
    expect((await call("/api/v1/audit/verify", { token: user.token })).status).toBe(403);
    const a = await admin();
    expect((await call("/audit/verify?after_id=-1", { token: a.token })).status).toBe(422);
  });
});

describe("publication without an explicit nudge", () => {
  const sealed = (id: number) => eventually(async () => (await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.id, id)).get())?.hash);

  it("a Worker request that recorded an event nudges the object after its response", async () => {
    const a = await admin();
    const { id } = await record(a.token, { event_type: unique("worker_written_") });
    expect(await sealed(id)).toMatch(/^[0-9a-f]{64}$/);
  });

  it("a site hub nudges it after its outbox wrote audit rows (a device coming online)", async () => {
    const a = await admin();
    const siteId = await createSite(a.token);
    const device = await registerDevice(a.token, siteId);
    expect((await heartbeat(device.device_id, device.api_key)).status).toBe(200);
    const online = await eventually(async () => (await rowsOfSite(siteId)).find((r) => r.eventType === "device_online"));
    expect(await sealed(online.id)).toMatch(/^[0-9a-f]{64}$/);
  });

  it("the minute cron seals rows whose nudge was lost", async () => {
    const [row] = await db().insert(schema.auditLogs).values({ eventType: unique("lost_nudge_"), category: "business_events" }).returning();
    await runCron();
    const after = (await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.id, row.id)).get())!;
    expect(after.hash).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe("live audit stream", () => {
  it("streams new events to an administrator and resumes after Last-Event-ID without gap or duplicate", async () => {
    const a = await admin();
    const siteId = await createSite(a.token);
    await nudge();
    const opened = await openStream(`/api/v1/audit/events/stream?site_id=${siteId}`, { token: a.token });
    expect(opened.status).toBe(200);
    expect(opened.headers.get("Content-Type")).toMatch(/^text\/event-stream/);
    const first = await record(a.token, { event_type: "transaction_processed", site_id: siteId, metadata: { n: 1 } });
    await nudge();
    const stream = opened.stream!;
    await stream.until(() => framesOf(stream.text()).some((f) => f.id === first.id), "the first event");
    const [frame] = framesOf(stream.text());
    expect(frame.event).toMatchObject({ id: first.id, event_type: "transaction_processed", site_id: siteId });
    expect(frame.event.hash).toMatch(/^[0-9a-f]{64}$/);
    expect((await call("/api/v1/audit/status", { token: a.token })).json.stream).toEqual({ subscribers: 1 });
    await stream.close();

    // Recorded while nobody listened: the resume replays exactly these, then streams live.
    const missed = [];
    for (let i = 0; i < 3; i++) missed.push((await record(a.token, { event_type: "transaction_processed", site_id: siteId, metadata: { n: 2 + i } })).id);
    await nudge();
    const resumed = (await openStream(`/audit/events/stream?site_id=${siteId}`, { token: a.token, headers: { "Last-Event-ID": String(first.id) } })).stream!;
    await resumed.until(() => framesOf(resumed.text()).length >= 3, "the replay");
    const live = await record(a.token, { event_type: "transaction_processed", site_id: siteId, metadata: { n: 9 } });
    await nudge();
    await resumed.until(() => framesOf(resumed.text()).some((f) => f.id === live.id), "the live event");
    expect(framesOf(resumed.text()).map((f) => f.id)).toEqual([...missed, live.id]);
  });

  it("replays from D1 when the id is older than what the object holds in memory", async () => {
    const a = await admin();
    const siteId = await createSite(a.token);
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await record(a.token, { event_type: "transaction_processed", site_id: siteId })).id);
    await nudge();
    // As after an eviction: the ring is empty and starts at the cursor.
    const stub = env.AUDIT_STREAM.get(env.AUDIT_STREAM.idFromName(AUDIT_STREAM_NAME));
    await runInDurableObject<AuditStream, void>(stub, (instance) => {
      const memory = instance as unknown as { ring: unknown[]; ringFloor: number; cursor: number };
      memory.ring = [];
      memory.ringFloor = memory.cursor;
    });
    const siteCreated = (await rowsOfSite(siteId))[0].id;
    const resumed = (await openStream(`/api/v1/audit/events/stream?site_id=${siteId}&since=${siteCreated}`, { token: a.token })).stream!;
    await resumed.until(() => framesOf(resumed.text()).length >= 3, "the replay from D1");
    const extra = await record(a.token, { event_type: "transaction_processed", site_id: siteId });
    await nudge();
    await resumed.until(() => framesOf(resumed.text()).some((f) => f.id === extra.id), "the live event");
    expect(framesOf(resumed.text()).map((f) => f.id)).toEqual([...ids, extra.id]);
  });

  it("filters by event_type, category and severity", async () => {
    const a = await admin();
    const siteId = await createSite(a.token);
    await nudge();
    const wanted = unique("wanted_");
    const stream = (await openStream(`/api/v1/audit/events/stream?site_id=${siteId}&event_type=${wanted}&category=business_events&severity=warning`, { token: a.token })).stream!;
    await record(a.token, { event_type: unique("other_"), site_id: siteId, severity: "warning" });
    await record(a.token, { event_type: wanted, site_id: siteId, severity: "info" });
    const hit = await record(a.token, { event_type: wanted, site_id: siteId, severity: "warning" });
    await nudge();
    await stream.until(() => framesOf(stream.text()).length >= 1, "the matching event");
    const marker = await record(a.token, { event_type: wanted, site_id: siteId, severity: "warning" });
    await nudge();
    await stream.until(() => framesOf(stream.text()).some((f) => f.id === marker.id), "the marker");
    expect(framesOf(stream.text()).map((f) => f.id)).toEqual([hit.id, marker.id]);
  });

  it("lets a site viewer watch that site only; others get 403", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const otherSite = await createSite(owner.token);
    const stranger = await signup();
    expect((await call("/api/v1/audit/events/stream", { token: owner.token })).status).toBe(403);
    expect((await call(`/api/v1/audit/events/stream?site_id=${siteId}`, { token: stranger.token })).status).toBe(403);
    expect((await call(`/api/v1/audit/events/stream?site_id=${siteId}`, { token: owner.token, headers: { "Last-Event-ID": "x" } })).status).toBe(422);
    expect((await call("/api/v1/audit/events/stream?severity=loud", { token: owner.token })).status).toBe(422);
    expect((await call("/api/v1/audit/events/stream")).status).toBe(401);

    await nudge();
    const stream = (await openStream(`/api/v1/audit/events/stream?site_id=${siteId}`, { token: owner.token })).stream!;
    const a = await admin();
    await record(a.token, { event_type: "transaction_processed", site_id: otherSite });
    const mine = await record(a.token, { event_type: "transaction_processed", site_id: siteId });
    await nudge();
    await stream.until(() => framesOf(stream.text()).some((f) => f.id === mine.id), "the site's event");
    expect(framesOf(stream.text()).every((f) => f.event.site_id === siteId)).toBe(true);
  });
});

describe("revocation of live audit streams", () => {
  const streamOf = async (query: string, token: string) => {
    const opened = await openStream(`/api/v1/audit/events/stream${query}`, { token });
    expect(opened.status).toBe(200);
    return opened.stream!;
  };

  it("ends a viewer's stream of a site when their membership is removed; other streams go on", async () => {
    const owner = await signup();
    const viewer = await signup();
    const siteId = await createSite(owner.token);
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    await nudge();
    const viewerStream = await streamOf(`?site_id=${siteId}`, viewer.token);
    const ownerStream = await streamOf(`?site_id=${siteId}`, owner.token);

    expect((await call(`/api/v1/sites/${siteId}/members/${viewer.id}`, { method: "DELETE", token: owner.token })).status).toBe(200);
    await viewerStream.waitForEnd();
    expect(viewerStream.text()).toContain(": access revoked");
    await nudge();
    const marker = await record((await admin()).token, { event_type: "transaction_processed", site_id: siteId });
    await nudge();
    await ownerStream.until(() => framesOf(ownerStream.text()).some((f) => f.id === marker.id), "the owner's stream to go on");
    expect(ownerStream.ended()).toBe(false);
    expect(framesOf(viewerStream.text()).some((f) => f.id === marker.id)).toBe(false);
    expect((await call(`/api/v1/audit/events/stream?site_id=${siteId}`, { token: viewer.token })).status).toBe(403);
  });

  it("ends a deactivated administrator's streams", async () => {
    const a = await admin();
    const other = await admin();
    await nudge();
    const everything = await streamOf("", a.token);
    const email = encodeURIComponent(a.email);
    expect((await call(`/api/v1/auth/users/${email}`, { method: "PATCH", token: other.token, body: { is_active: false } })).status).toBe(200);
    await everything.waitForEnd();
  });

  it("ends a demoted administrator's unscoped stream, and keeps their stream of a site they still own", async () => {
    const a = await admin();
    const siteId = await createSite(a.token);
    await nudge();
    const everything = await streamOf("", a.token);
    const ownSite = await streamOf(`?site_id=${siteId}`, a.token);
    const foreignSite = await createSite((await admin()).token);
    const foreign = await streamOf(`?site_id=${foreignSite}`, a.token);
    // No route takes the flag away; whatever does must run the revocation path after it.
    await db().update(schema.users).set({ isAdmin: false }).where(eq(schema.users.id, a.id));
    await syncLiveAccess(env, db(), a.id, []);
    await everything.waitForEnd();
    await foreign.waitForEnd();
    const marker = await record((await admin()).token, { event_type: "transaction_processed", site_id: siteId });
    await nudge();
    await ownSite.until(() => framesOf(ownSite.text()).some((f) => f.id === marker.id), "the own site's event");
    expect(ownSite.ended()).toBe(false);
  });
});
