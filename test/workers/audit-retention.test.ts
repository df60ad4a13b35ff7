import { env } from "cloudflare:workers";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { desc, eq, isNotNull, sql } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { ARCHIVE_MAX_OBJECTS_PER_RUN, ARCHIVE_OBJECT_MAX_EVENTS } from "../../src/services/audit-retention";
import { admin, call, db, fetchChecked, signup, unique } from "./helpers";
import { installWorkerClock } from "./clock";
import { runCron } from "./commands-helpers";
import { runScheduled } from "../../src/scheduled";

const DAY = 86_400_000;
let adminAccount: { email: string; password: string };
let adminToken: string;
let clock: ReturnType<typeof installWorkerClock> | undefined;

beforeAll(async () => {
  const account = await admin();
  adminAccount = account;
  adminToken = account.token;
});

/** Signs the administrator in again: after the clock moves days on, the earlier token has expired. */
async function signInAgain() {
  const res = await call("/api/v1/auth/login", { method: "POST", body: { email: adminAccount.email, password: adminAccount.password } });
  expect(res.status).toBe(200);
  adminToken = res.json.data.access_token;
}
afterEach(async () => {
  if (!clock) return;
  clock.restore();
  clock = undefined;
  await signInAgain();
});

const setPolicy = (body: Record<string, unknown>, path = "/api/v1/audit/retention") => call(path, { method: "POST", token: adminToken, body });
const getPolicy = () => call("/api/v1/audit/retention", { token: adminToken });

/** Records custom events now (real time), each findable by its description. */
async function recordEvents(tag: string, n: number) {
  for (let i = 0; i < n; i++) {
    const res = await call("/api/v1/audit/events", { method: "POST", token: adminToken, body: { event_type: "transaction_processed", description: `${tag}-${i}` } });
    expect(res.status).toBe(201);
  }
}

const rowsTagged = (tag: string) =>
  db().select().from(schema.auditLogs).where(sql`${schema.auditLogs.description} LIKE ${`${tag}-%`}`).all();

async function download(archiveId: string) {
  return fetchChecked(new Request(`http://fleet.test/api/v1/audit/archives/${archiveId}`, { headers: { Authorization: `Bearer ${adminToken}` } }));
}

const gunzipText = async (bytes: ArrayBuffer) =>
  new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).text();

/** Every archived event's description, across the archives listed. */
async function archivedDescriptions(): Promise<string[]> {
  await signInAgain();
  const list = await call("/api/v1/audit/archives?limit=500", { token: adminToken });
  expect(list.status).toBe(200);
  const out: string[] = [];
  for (const archive of list.json.archives as { archive_id: string; compressed: boolean }[]) {
    const res = await download(archive.archive_id);
    expect(res.status).toBe(200);
    const bytes = await res.arrayBuffer();
    const text = archive.compressed ? await gunzipText(bytes) : new TextDecoder().decode(bytes);
    for (const line of text.trimEnd().split("\n")) out.push((JSON.parse(line) as { description: string }).description);
  }
  return out;
}

// Tests run in order and share the database: the policy each sets is the next one's starting point.
describe("audit retention", () => {
  it("no policy at first: the cron archives and deletes nothing", async () => {
    const res = await getPolicy();
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ policy: null, encryption_key: "configured" });
    const before = (await db().select({ n: sql<number>`count(*)` }).from(schema.auditLogs).get())!.n;
    await runCron(Date.now() + 3650 * DAY);
    expect((await db().select({ n: sql<number>`count(*)` }).from(schema.auditLogs).get())!.n).toBe(before);
  });

  it("refuses an archive age beyond the retention and encryption without archiving (422, nothing stored), and non-administrators", async () => {
    for (const body of [
      { retention_days: 30, archive_after_days: 31 },
      { retention_days: 30, archive_after_days: null, encryption_required: true },
      { retention_days: 0, archive_after_days: null },
      { retention_days: 30 },
      { retention_days: 30, archive_after_days: 7, compress_archives: "yes" },
    ]) {
      const res = await setPolicy(body);
      expect(res.status, JSON.stringify(body)).toBe(422);
      expect(res.json.detail).toEqual(expect.any(Array));
    }
    expect((await getPolicy()).json.policy).toBeNull();
    const user = await signup();
    expect((await call("/api/v1/audit/retention", { method: "POST", token: user.token, body: { retention_days: 30, archive_after_days: 7 } })).status).toBe(403);
    expect((await call("/api/v1/audit/retention", { token: user.token })).status).toBe(403);
  });

  it("refuses encryption when no key is configured", async () => {
    const saved = env.AUDIT_ARCHIVE_KEY;
    try {
      delete env.AUDIT_ARCHIVE_KEY;
      const res = await setPolicy({ retention_days: 30, archive_after_days: 7, encryption_required: true });
      expect(res.status).toBe(422);
      expect(JSON.stringify(res.json.detail)).toContain("AUDIT_ARCHIVE_KEY");
      expect((await getPolicy()).json).toEqual({ policy: null, encryption_key: "missing" });
    } finally {
      env.AUDIT_ARCHIVE_KEY = saved;
    }
  });

  it("stores the policy (both path forms) and audits the change as config_updated", async () => {
    const res = await setPolicy({ retention_days: 30, archive_after_days: 7 }, "/audit/retention");
    expect(res.status).toBe(200);
    expect(res.json.policy).toMatchObject({ retention_days: 30, archive_after_days: 7, compress_archives: true, encryption_required: false });
    const audited = await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.eventType, "config_updated")).all();
    expect(audited).toHaveLength(1);
    expect(audited[0]).toMatchObject({ category: "system_events", eventMetadata: { setting: "audit_retention", previous: null, current: { retention_days: 30, archive_after_days: 7 } } });
    expect((await getPolicy()).json.policy).toMatchObject({ retention_days: 30, archive_after_days: 7 });
  });

  it("the cron archives events older than archive_after_days as gzip NDJSON, then deletes them past retention_days", async () => {
    const tag = unique("arch");
    await recordEvents(tag, 3);
    clock = installWorkerClock();
    clock.advance(6 * DAY);
    await runCron(clock.now());
    expect((await rowsTagged(tag)).every((r) => r.archivedAt === null)).toBe(true);

    clock.advance(2 * DAY);
    await runCron(clock.now());
    const archivedRows = await rowsTagged(tag);
    expect(archivedRows).toHaveLength(3);
    expect(archivedRows.every((r) => r.archivedAt !== null)).toBe(true);
    const described = await archivedDescriptions();
    expect(described.filter((d) => d?.startsWith(tag)).sort()).toEqual([`${tag}-0`, `${tag}-1`, `${tag}-2`]);
    const [archive] = (await call("/api/v1/audit/archives", { token: adminToken })).json.archives;
    expect(archive).toMatchObject({ compressed: true, encrypted: false, archive_id: expect.stringMatching(/\.ndjson\.gz$/) });
    // Archived once: a later run does not archive them again.
    clock.advance(DAY);
    await runCron(clock.now());
    expect((await archivedDescriptions()).filter((d) => d?.startsWith(tag))).toHaveLength(3);

    clock.advance(22 * DAY); // 31 days after the events
    await runCron(clock.now());
    expect(await rowsTagged(tag)).toEqual([]);
    // the archive outlives the rows
    expect((await archivedDescriptions()).filter((d) => d?.startsWith(tag))).toHaveLength(3);
  });

  it("works in bounded batches per run and never deletes an event that is not archived yet", async () => {
    const total = ARCHIVE_OBJECT_MAX_EVENTS * ARCHIVE_MAX_OBJECTS_PER_RUN + 500;
    const tag = unique("bulk");
    await env.DB.prepare(`
      WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?1 - 1)
      INSERT INTO audit_logs (event_type, category, severity, description, event_metadata)
      SELECT 'transaction_processed', 'business_events', 'info', ?2 || '-' || i, '{}' FROM n`).bind(total, tag).run();
    expect(await setPolicy({ retention_days: 2, archive_after_days: 1, compress_archives: false })).toMatchObject({ status: 200 });
    clock = installWorkerClock();
    clock.advance(3 * DAY);

    await runCron(clock.now());
    let rows = await rowsTagged(tag);
    const archivedNow = ARCHIVE_OBJECT_MAX_EVENTS * ARCHIVE_MAX_OBJECTS_PER_RUN;
    // At most one run's worth archived; exactly those (and nothing unarchived) deleted.
    expect(rows.length).toBeGreaterThanOrEqual(total - archivedNow);
    expect(rows.length).toBeLessThan(total);
    expect(rows.every((r) => r.archivedAt === null)).toBe(true);

    for (let run = 0; run < 3 && rows.length; run++) {
      await runCron(clock.now());
      rows = await rowsTagged(tag);
    }
    expect(rows).toEqual([]);
    const described = (await archivedDescriptions()).filter((d) => d?.startsWith(`${tag}-`));
    expect(described).toHaveLength(total);
    expect(new Set(described).size).toBe(total);
  });

  it("encrypts archives with AES-256-GCM when required; the download decrypts them", async () => {
    expect((await setPolicy({ retention_days: 30, archive_after_days: 1, compress_archives: true, encryption_required: true })).status).toBe(200);
    const tag = unique("enc");
    await recordEvents(tag, 2);
    clock = installWorkerClock();
    clock.advance(2 * DAY);
    await runCron(clock.now());
    await signInAgain();
    const list = await call("/api/v1/audit/archives?limit=500", { token: adminToken });
    const encrypted = (list.json.archives as { archive_id: string; encrypted: boolean }[]).filter((a) => a.encrypted);
    expect(encrypted.length).toBeGreaterThan(0);
    let found = 0;
    for (const archive of encrypted) {
      expect(archive.archive_id).toMatch(/\.ndjson\.gz\.enc$/);
      const stored = new Uint8Array(await (await env.AUDIT_ARCHIVE.get(`audit/${archive.archive_id}`))!.arrayBuffer());
      // Not gzip (no 1f 8b magic) and no plaintext.
      expect([stored[0], stored[1]]).not.toEqual([0x1f, 0x8b]);
      expect(new TextDecoder().decode(stored)).not.toContain(tag);
      const res = await download(archive.archive_id);
      expect(res.headers.get("Content-Type")).toBe("application/gzip");
      expect(res.headers.get("Content-Disposition")).toContain(archive.archive_id.replace(/\.enc$/, ""));
      found += (await gunzipText(await res.arrayBuffer())).split("\n").filter((l) => l.includes(tag)).length;
    }
    expect(found).toBe(2);

    // Without the key the archive cannot be read: 409, not garbage.
    const saved = env.AUDIT_ARCHIVE_KEY;
    try {
      delete env.AUDIT_ARCHIVE_KEY;
      const res = await call(`/api/v1/audit/archives/${encrypted[0].archive_id}`, { token: adminToken });
      expect(res.status).toBe(409);
    } finally {
      env.AUDIT_ARCHIVE_KEY = saved;
    }
  });

  it("a run interrupted between writing an archive and marking its events loses nothing and duplicates nothing", async () => {
    const tag = unique("intr");
    await recordEvents(tag, 2);
    clock = installWorkerClock();
    clock.advance(2 * DAY);
    // D1 refuses batches (the marking is one) for this run only: the object is written, its events stay unmarked.
    const real = env.DB;
    const refusingBatches: D1Database = {
      prepare: (query) => real.prepare(query),
      exec: (query) => real.exec(query),
      dump: () => real.dump(),
      withSession: (constraint) => real.withSession(constraint),
      batch: async () => { throw new Error("D1_ERROR: simulated outage"); },
    };
    const failed = await runScheduled({ ...env, DB: refusingBatches }, new Date(clock.now()));
    expect(failed).toContain("audit retention");
    const stranded = await rowsTagged(tag);
    expect(stranded).toHaveLength(2);
    expect(stranded.every((r) => r.archivedAt === null)).toBe(true);
    const lastRun = await db().select().from(schema.auditRetentionRuns).orderBy(desc(schema.auditRetentionRuns.id)).get();
    expect(lastRun?.error).toMatch(/archiving failed/);

    await runCron(clock.now());
    expect((await rowsTagged(tag)).every((r) => r.archivedAt !== null)).toBe(true);
    expect((await archivedDescriptions()).filter((d) => d?.startsWith(tag)).sort()).toEqual([`${tag}-0`, `${tag}-1`]);
  });

  it("archive listing and download validate their input", async () => {
    expect((await call("/api/v1/audit/archives?day=yesterday", { token: adminToken })).status).toBe(422);
    expect((await call("/api/v1/audit/archives/..%2Fsecret", { token: adminToken })).status).toBe(422);
    expect((await call("/api/v1/audit/archives/2001-01-01-1.ndjson", { token: adminToken })).status).toBe(404);
    const user = await signup();
    expect((await call("/api/v1/audit/archives", { token: user.token })).status).toBe(403);
    const archived = await db().select().from(schema.auditArchives).where(isNotNull(schema.auditArchives.day)).all();
    expect(archived.length).toBeGreaterThan(0);
  });
});
