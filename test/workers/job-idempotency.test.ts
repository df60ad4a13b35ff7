import { describe, expect, it } from "vitest";
import { and, eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { call, createSite, db, signup, unique } from "./helpers";

const createJob = (token: string, siteId: string, body: Record<string, unknown>, key?: string) =>
  call(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token, body, headers: key ? { "Idempotency-Key": key } : {} });

const jobsOf = (siteId: string) => db().select().from(schema.jobs).where(eq(schema.jobs.siteId, siteId)).all();
const createdAudits = (siteId: string) => db().select().from(schema.auditLogs)
  .where(and(eq(schema.auditLogs.siteId, siteId), eq(schema.auditLogs.eventType, "job_created"))).all();

describe("job creation with an Idempotency-Key", () => {
  it("answers a repeat with the same job (201, same body) and creates it once", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const key = crypto.randomUUID();
    const body = { action: "restart", description: "nightly", priority: "high" };
    const first = await createJob(owner.token, siteId, body, key);
    expect(first.status).toBe(201);
    expect(first.headers.get("Idempotent-Replayed")).toBeNull();
    const again = await createJob(owner.token, siteId, body, key);
    expect(again.status).toBe(201);
    expect(again.json).toEqual(first.json);
    expect(again.headers.get("Idempotent-Replayed")).toBe("true");
    // the same request with its keys in another order is the same request
    const reordered = await createJob(owner.token, siteId, { priority: "high", description: "nightly", action: "restart" }, key);
    expect(reordered.json.job_id).toBe(first.json.job_id);
    expect(await jobsOf(siteId)).toHaveLength(1);
    expect(await createdAudits(siteId)).toHaveLength(1);
  });

  it("refuses the same key with a different body (422) and creates nothing", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const key = crypto.randomUUID();
    expect((await createJob(owner.token, siteId, { action: "restart" }, key)).status).toBe(201);
    const other = await createJob(owner.token, siteId, { action: "shutdown" }, key);
    expect(other.status).toBe(422);
    expect(other.json.detail[0]).toMatchObject({ loc: ["header", "idempotency-key"], type: "idempotency_mismatch" });
    expect(await jobsOf(siteId)).toHaveLength(1);
  });

  it("scopes keys per site: the same key on another site is another job", async () => {
    const owner = await signup();
    const siteA = await createSite(owner.token);
    const siteB = await createSite(owner.token);
    const key = crypto.randomUUID();
    const a = await createJob(owner.token, siteA, { action: "restart" }, key);
    const b = await createJob(owner.token, siteB, { action: "restart" }, key);
    expect(b.status).toBe(201);
    expect(b.json.job_id).not.toBe(a.json.job_id);
  });

  it("gives concurrent repeats one job", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    const key = crypto.randomUUID();
    const answers = await Promise.all(Array.from({ length: 6 }, () => createJob(owner.token, siteId, { action: "ping" }, key)));
    expect(answers.map((a) => a.status)).toEqual(Array(6).fill(201));
    expect(new Set(answers.map((a) => a.json.job_id)).size).toBe(1);
    expect(await jobsOf(siteId)).toHaveLength(1);
    expect(await createdAudits(siteId)).toHaveLength(1);
  });

  it("still creates a job per request without a key, and checks the role before anything", async () => {
    const owner = await signup();
    const siteId = await createSite(owner.token);
    await createJob(owner.token, siteId, { action: "restart" });
    await createJob(owner.token, siteId, { action: "restart" });
    expect(await jobsOf(siteId)).toHaveLength(2);
    const key = unique("k");
    const first = await createJob(owner.token, siteId, { action: "ping" }, key);
    const stranger = await signup();
    const replay = await createJob(stranger.token, siteId, { action: "ping" }, key);
    expect(replay.status).toBe(404);
    expect(replay.text).not.toContain(first.json.job_id);
  });
});
