import { describe, expect, it } from "vitest";
import { and, eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { call, createSite, db, grantSiteRole, signup, unique } from "./helpers";
import { registerDevice, siteWithOperator } from "./device-helpers";
import { auditOfType, flushHub, hubSql, liveEvents, poll, report, runAlarm, runCron } from "./commands-helpers";
import { installClock } from "./clock";

type User = Awaited<ReturnType<typeof signup>>;

const createJob = (token: string, siteId: string, body: Record<string, unknown>, path = `/api/v1/jobs/sites/${siteId}/jobs`) =>
  call(path, { method: "POST", token, body: { description: "test job", priority: "medium", ...body } });

const getJob = async (token: string, jobId: string) => (await call(`/api/v1/jobs/${jobId}`, { token })).json;

/** The job as D1 has it once the hub wrote everything it holds (instead of within its one-second window). */
async function jobNow(token: string, siteId: string, jobId: string) {
  await flushHub(siteId);
  return getJob(token, jobId);
}

/**
 * A new job is due in its hub at once; this runs that alarm now (instead of waiting for the runtime
 * to fire it) and writes what the hub holds to D1, then the job must read as sent.
 */
async function sentByHub(token: string, siteId: string, jobId: string) {
  const [run] = await hubSql<{ start_due_ms: number }>(siteId, "SELECT start_due_ms FROM job_runs WHERE job_id = ?", jobId);
  expect(run, "the hub holds the job").toBeDefined();
  expect(run.start_due_ms).toBeLessThanOrEqual(Date.now());
  await runAlarm(siteId);
  await flushHub(siteId);
  const job = await getJob(token, jobId);
  expect(job.status).toBe("sent");
  return job;
}

/** Lets every simulated command finish now instead of after its simulated run time. */
async function finishSimulated(siteId: string) {
  await hubSql(siteId, "UPDATE commands SET sim_due_ms = ? WHERE sim_due_ms IS NOT NULL", Date.now() - 1);
  await runAlarm(siteId);
}

async function simulatedSite(count: number, owner?: User) {
  const setup = owner ? { owner, siteId: (await siteWithOperator()).siteId } : await siteWithOperator();
  const sims = [];
  for (let i = 0; i < count; i++) sims.push(await registerDevice(setup.owner.token, setup.siteId, { device_source: "simulated", device_id: unique("SIM-") }));
  return { ...setup, sims };
}

describe("jobs: the lifecycle", () => {
  it("goes queued → sent → completed over three simulated devices, with per-device executions, audit, outcome and live events", async () => {
    const { owner, siteId, sims } = await simulatedSite(3);
    const res = await createJob(owner.token, siteId, { action: "REBOOT", priority: "high", description: "nightly restart" });
    expect(res.status, res.text).toBe(201);
    expect(res.json).toEqual({ message: "Job created successfully", job_id: res.json.job_id, site_id: siteId, action: "REBOOT", status: "queued" });
    const jobId = res.json.job_id;
    expect(jobId).toMatch(/^job-[0-9a-f]{12}$/);

    const audit = await auditOfType(siteId, "job_created");
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({ jobId, userId: owner.id, category: "job_management", severity: "info" });
    expect(audit[0].eventMetadata).toEqual({ action: "REBOOT", priority: "high" });

    // Due at once in the hub; once its alarm ran the job is sent (restarts take the simulated agents 2–6 s, so `sent` is visible).
    const sent = await sentByHub(owner.token, siteId, jobId);
    expect(sent.started_at).not.toBeNull();
    expect(sent.segment).toBe("pos-terminals");
    expect(sent.config_url).toBe(`/api/v1/jobs/${jobId}`);
    expect(sent.config_version).toMatch(/^\d{4}\.\d{2}\.\d{2}-\d{6}$/);
    expect(sent.completed_at).toBeNull();
    expect(sent.result).toBeNull();

    await finishSimulated(siteId);
    const done = await getJob(owner.token, jobId);
    expect(done.status).toBe("completed");
    expect(done.result).toEqual({ total: 3, succeeded: 3, failed: 0, cancelled: 0, pending: 0, skipped: 0 });
    expect(done.error_message).toBeNull();
    expect(done.completed_at).not.toBeNull();
    expect(done.counts).toEqual({ total: 3, succeeded: 3, failed: 0, pending: 0, cancelled: 0, skipped: 0 });
    expect(done.executions.map((e: { device_id: string }) => e.device_id).sort()).toEqual(sims.map((s) => s.device_id).sort());
    for (const e of done.executions) {
      expect(e.status).toBe("completed");
      expect(e.command_id).toMatch(/^[0-9a-f-]{36}$/);
      expect(e.result.reboot_time_seconds).toBeGreaterThanOrEqual(2);
      expect(e.completed_at).not.toBeNull();
      const command = (await call(`/api/v1/commands/${e.command_id}`, { token: owner.token })).json;
      expect(command).toMatchObject({ command_type: "restart", status: "completed", created_by: owner.email });
      expect(command.payload).toMatchObject({ job_id: jobId, action: "REBOOT", segment: "pos-terminals", config_version: sent.config_version });
    }

    expect((await auditOfType(siteId, "job_started")).map((a) => a.jobId)).toEqual([jobId]);
    const completed = await auditOfType(siteId, "job_completed");
    expect(completed).toHaveLength(1);
    expect(completed[0].eventMetadata).toMatchObject({ action: "REBOOT", priority: "high", result: { total: 3, succeeded: 3 } });
    // One outcome for the job, and one per device execution.
    const outcomes = await db().select().from(schema.jobOutcomes).where(eq(schema.jobOutcomes.jobId, jobId)).all();
    const jobOutcome = outcomes.filter((o) => o.scope === "job");
    expect(jobOutcome).toHaveLength(1);
    expect(jobOutcome[0]).toMatchObject({ status: "completed", jobType: "REBOOT", initiatedBy: owner.email, siteId, deviceId: null });
    const executionOutcomes = outcomes.filter((o) => o.scope === "execution");
    expect(executionOutcomes.map((o) => o.deviceId).sort()).toEqual(sims.map((s) => s.device_id).sort());
    for (const o of executionOutcomes) {
      expect(o).toMatchObject({ status: "completed", jobType: "REBOOT", initiatedBy: owner.email, siteId, errorCode: null, retryCount: 0 });
      expect(o.durationMs).toBeGreaterThanOrEqual(0);
    }
    const live = (await liveEvents(siteId, "job.updated")).filter((e) => e.job_id === jobId).map((e) => e.status);
    expect(live).toEqual(["queued", "sent", "completed"]);

    const legacy = await call(`/jobs/${jobId}`, { token: owner.token });
    expect(legacy.status).toBe(200);
    expect(legacy.json).toEqual(done);
    expect(legacy.headers.get("Deprecation")).toBe("true");
  });

  it("fails with counts when one device reports a failure", async () => {
    const { owner, siteId, sims } = await simulatedSite(2);
    const real = await registerDevice(owner.token, siteId, { device_id: unique("POS-") });
    const res = await createJob(owner.token, siteId, { action: "ping", target_device_ids: [...sims.map((s) => s.device_id), real.device_id] }, `/sites/${siteId}/jobs`);
    expect(res.status).toBe(201);
    expect(res.headers.get("Deprecation")).toBe("true");
    const jobId = res.json.job_id;
    await sentByHub(owner.token, siteId, jobId);

    // The real terminal gets its share of the job through its own queue and reports a failure.
    const polled = await poll(real);
    expect(polled.json.commands).toHaveLength(1);
    const [command] = polled.json.commands;
    expect(command).toMatchObject({ command_type: "ping", payload: { job_id: jobId, action: "ping" } });
    expect((await report(real, command.command_id, { status: "failed", error_message: "network unreachable" })).status).toBe(200);
    await finishSimulated(siteId);

    const job = await jobNow(owner.token, siteId, jobId);
    expect(job.status).toBe("failed");
    expect(job.result).toEqual({ total: 3, succeeded: 2, failed: 1, cancelled: 0, pending: 0, skipped: 0 });
    expect(job.error_message).toBe(`1 of 3 devices failed: ${real.device_id}: network unreachable`);
    const execution = job.executions.find((e: { device_id: string }) => e.device_id === real.device_id);
    expect(execution).toMatchObject({ status: "failed", command_id: command.command_id, error_message: "network unreachable" });
    for (const sim of sims) {
      const e = job.executions.find((x: { device_id: string }) => x.device_id === sim.device_id);
      expect(e.status).toBe("completed");
      expect(e.result.latency_ms).toBeGreaterThanOrEqual(5);
      expect(e.result.latency_ms).toBeLessThanOrEqual(50);
    }
    await flushHub(siteId);
    const failed = await auditOfType(siteId, "job_failed");
    expect(failed.map((a) => [a.jobId, a.severity])).toEqual([[jobId, "error"]]);
    const outcomes = await db().select().from(schema.jobOutcomes).where(eq(schema.jobOutcomes.jobId, jobId)).all();
    expect(outcomes.find((o) => o.scope === "job")!.errorCode).toBe("DEVICE_FAILURES");
    expect(outcomes.find((o) => o.deviceId === real.device_id)).toMatchObject({
      scope: "execution", status: "failed", errorCode: "FAILED", metadata: { command_id: command.command_id, error_message: "network unreachable" },
    });
    expect(outcomes.filter((o) => o.scope === "execution" && o.status === "completed")).toHaveLength(sims.length);
  });

  it("times out at its deadline and cancels what is still open", async () => {
    const { owner, siteId } = await siteWithOperator();
    const real = await registerDevice(owner.token, siteId, { device_id: unique("POS-") });
    const clock = await installClock(siteId);
    const res = await createJob(owner.token, siteId, { action: "UPDATE_CONFIG", deadline_s: 60, config_version: "7.1" });
    const jobId = res.json.job_id;
    const sent = await sentByHub(owner.token, siteId, jobId);
    expect(Date.parse(sent.deadline_at) - Date.parse(sent.created_at)).toBe(60_000);
    expect(sent.config_version).toBe("7.1");
    const commandId = sent.executions[0].command_id;

    // Past the deadline, which the Worker set from its own clock when it created the job.
    clock.advance(65_000);
    await runAlarm(siteId);
    const job = await getJob(owner.token, jobId);
    expect(job.status).toBe("timeout");
    expect(job.result).toEqual({ total: 1, succeeded: 0, failed: 0, cancelled: 0, pending: 1, skipped: 0 });
    expect(job.error_message).toBe("Timed out after 60 s: 1 of 1 devices had not reported");
    expect(job.executions[0].status).toBe("cancelled");
    const command = (await call(`/api/v1/commands/${commandId}`, { token: owner.token })).json;
    expect(command).toMatchObject({ status: "cancelled", error_message: "Job timed out" });
    expect((await poll(real)).json.commands).toEqual([]);
    expect((await report(real, commandId, { status: "completed" })).status).toBe(409);
    expect((await auditOfType(siteId, "job_timeout")).map((a) => a.jobId)).toEqual([jobId]);
  });

  it("cancels a job and stops its open commands", async () => {
    const { owner, siteId, sims } = await simulatedSite(1);
    const real = await registerDevice(owner.token, siteId, { device_id: unique("POS-") });
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    const jobId = (await createJob(owner.token, siteId, { action: "restart" })).json.job_id;
    const sent = await sentByHub(owner.token, siteId, jobId);
    expect(sent.executions).toHaveLength(2);

    expect((await call(`/api/v1/jobs/${jobId}/cancel`, { method: "POST", token: viewer.token })).status).toBe(403);
    const cancelled = await call(`/api/v1/jobs/${jobId}/cancel`, { method: "POST", token: owner.token });
    expect(cancelled.status, cancelled.text).toBe(200);
    expect(cancelled.json).toMatchObject({ status: "cancelled", error_message: `Cancelled by ${owner.email}`, result: { total: 2, succeeded: 0, failed: 0, cancelled: 0, pending: 2 } });
    expect(cancelled.json.counts).toMatchObject({ total: 2, cancelled: 2 });
    for (const e of cancelled.json.executions) {
      expect(e.status).toBe("cancelled");
      expect((await call(`/api/v1/commands/${e.command_id}`, { token: owner.token })).json.status).toBe("cancelled");
    }
    // The real device no longer gets it, and the simulated agent's restart never completes.
    expect((await poll(real)).json.commands).toEqual([]);
    await finishSimulated(siteId);
    const after = await getJob(owner.token, jobId);
    expect(after.status).toBe("cancelled");
    expect(after.executions.find((e: { device_id: string }) => e.device_id === sims[0].device_id).status).toBe("cancelled");

    const again = await call(`/api/v1/jobs/${jobId}/cancel`, { method: "POST", token: owner.token });
    expect(again.status).toBe(200);
    expect(again.json.status).toBe("cancelled");
    const audits = await auditOfType(siteId, "job_cancelled");
    expect(audits.map((a) => [a.jobId, a.userId])).toEqual([[jobId, owner.id]]);
  });

  it("cancels a job still queued, even one its hub never received", async () => {
    const { owner, siteId } = await simulatedSite(1);
    const jobId = `job-${unique().slice(-12)}`;
    const createdAt = new Date().toISOString();
    await db().insert(schema.jobs).values({
      jobId, siteId, action: "ping", priority: "medium", status: "queued", createdBy: owner.email, createdAt, updatedAt: createdAt,
      deadlineAt: new Date(Date.now() + 600_000).toISOString(),
    });
    const cancelled = await call(`/api/v1/jobs/${jobId}/cancel`, { method: "POST", token: owner.token });
    expect(cancelled.status, cancelled.text).toBe(200);
    expect(cancelled.json).toMatchObject({ status: "cancelled", started_at: null, result: { total: 0, pending: 0 }, executions: [] });
    expect(cancelled.json.completed_at).not.toBeNull();
    // Nothing starts it afterwards: not the hub's alarm, not the cron.
    await runAlarm(siteId);
    await runCron();
    expect((await getJob(owner.token, jobId)).status).toBe("cancelled");
    expect(await hubSql(siteId, "SELECT command_id FROM commands WHERE job_id = ?", jobId)).toEqual([]);
  });

  it("completes at once, saying so, when no device matches; a finished job cannot be cancelled", async () => {
    const { owner, siteId } = await simulatedSite(1);
    const jobId = (await createJob(owner.token, siteId, { action: "ping", device_type: "kiosk" })).json.job_id;
    // Due at once in its hub, whose alarm finds nothing to send.
    await runAlarm(siteId);
    const job = await jobNow(owner.token, siteId, jobId);
    expect(job.status).toBe("completed");
    expect(job.result).toEqual({ total: 0, succeeded: 0, failed: 0, cancelled: 0, pending: 0, skipped: 0, message: "No devices matched the job's targets" });
    expect(job.segment).toBe("kiosks");
    expect(job.executions).toEqual([]);
    expect(job.started_at).not.toBeNull();
    const refused = await call(`/api/v1/jobs/${jobId}/cancel`, { method: "POST", token: owner.token });
    expect(refused.status).toBe(409);
    expect(refused.json.detail).toBe(`Job ${jobId} is already completed`);
  });
});

describe("jobs: the cron safety net", () => {
  it("picks up a job stuck in queued that its hub never heard of, once", async () => {
    const { owner, siteId, sims } = await simulatedSite(2);
    const jobId = `job-${unique().slice(-12)}`;
    const createdAt = new Date(Date.now() - 120_000).toISOString();
    await db().insert(schema.jobs).values({
      jobId, siteId, action: "ping", description: "handed over before a crash", priority: "low", status: "queued",
      createdBy: owner.email, createdAt, updatedAt: createdAt, deadlineAt: new Date(Date.now() + 600_000).toISOString(),
    });
    // Nothing but the cron can move it: its hub holds no run for it.
    expect(await hubSql(siteId, "SELECT job_id FROM job_runs WHERE job_id = ?", jobId)).toEqual([]);
    expect((await getJob(owner.token, jobId)).status).toBe("queued");

    await runCron();
    const sent = await getJob(owner.token, jobId);
    expect(["sent", "completed"]).toContain(sent.status);
    expect(sent.started_at).not.toBeNull();
    expect(sent.executions.map((e: { device_id: string }) => e.device_id).sort()).toEqual(sims.map((s) => s.device_id).sort());
    await finishSimulated(siteId);
    const done = await jobNow(owner.token, siteId, jobId);
    expect(done.status).toBe("completed");
    expect(done.result).toEqual({ total: 2, succeeded: 2, failed: 0, cancelled: 0, pending: 0, skipped: 0 });

    await runCron();
    expect((await auditOfType(siteId, "job_started")).filter((a) => a.jobId === jobId)).toHaveLength(1);
    expect((await auditOfType(siteId, "job_completed")).filter((a) => a.jobId === jobId)).toHaveLength(1);
  });

  it("times out a sent job whose hub lost track of it", async () => {
    const { owner, siteId } = await siteWithOperator();
    await registerDevice(owner.token, siteId, { device_id: unique("POS-") });
    const jobId = (await createJob(owner.token, siteId, { action: "ping", deadline_s: 30 })).json.job_id;
    await sentByHub(owner.token, siteId, jobId);
    await hubSql(siteId, "DELETE FROM job_runs WHERE job_id = ?", jobId);
    await hubSql(siteId, "DELETE FROM job_targets WHERE job_id = ?", jobId);
    await db().update(schema.jobs).set({ deadlineAt: new Date(Date.now() - 1000).toISOString() }).where(eq(schema.jobs.jobId, jobId));
    await runCron();
    const job = await getJob(owner.token, jobId);
    expect(job.status).toBe("timeout");
    expect(job.result).toMatchObject({ total: 1, pending: 1 });
  });
});

describe("jobs: access, validation and lists", () => {
  it("requires the operator role to create and checks targets", async () => {
    const { owner, siteId, sims } = await simulatedSite(1);
    const viewer = await signup();
    await grantSiteRole(owner.token, siteId, viewer, "viewer");
    expect((await createJob(viewer.token, siteId, { action: "ping" })).status).toBe(403);
    const hiddenSite = await createJob((await signup()).token, siteId, { action: "ping" });
    expect([hiddenSite.status, hiddenSite.json]).toEqual([404, { detail: `Site with ID '${siteId}' not found` }]);
    expect((await createJob(owner.token, `NOPE-${unique()}`, { action: "ping" })).status).toBe(404);
    expect((await call(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", body: { action: "ping" } })).status).toBe(401);
    expect((await createJob(owner.token, siteId, { action: "" })).status).toBe(422);
    expect((await createJob(owner.token, siteId, { action: "ping", priority: "urgent" })).status).toBe(422);
    const elsewhere = await registerDevice(owner.token, await createSite(owner.token));
    const bad = await createJob(owner.token, siteId, { action: "ping", target_device_ids: [sims[0].device_id, elsewhere.device_id] });
    expect(bad.status).toBe(422);
    expect(bad.json.detail[0].loc).toEqual(["body", "target_device_ids"]);
    const ok = await createJob(owner.token, siteId, { action: "ping" });
    expect(ok.status).toBe(201);
    expect((await call(`/api/v1/jobs/${ok.json.job_id}`, { token: viewer.token })).status).toBe(200);
    const stranger = await signup();
    for (const hiddenCall of [
      call(`/api/v1/jobs/${ok.json.job_id}`, { token: stranger.token }),
      call(`/api/v1/jobs/${ok.json.job_id}/cancel`, { method: "POST", token: stranger.token }),
    ]) {
      const hidden = await hiddenCall;
      expect([hidden.status, hidden.json]).toEqual([404, { detail: `Job with ID '${ok.json.job_id}' not found` }]);
    }
    expect((await call(`/api/v1/jobs/job-000000000000`, { token: owner.token })).status).toBe(404);
  });

  it("lists the caller's jobs newest first with filters and paging", async () => {
    const { owner, siteId } = await siteWithOperator();
    const other = await siteWithOperator();
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await createJob(owner.token, siteId, { action: `task ${i}` })).json.job_id);
    const foreign = (await createJob(other.owner.token, other.siteId, { action: "ping" })).json.job_id;

    const mine = await call("/api/v1/jobs?limit=2", { token: owner.token });
    expect(mine.status).toBe(200);
    expect(mine.json).toMatchObject({ total: 3, limit: 2, offset: 0 });
    expect(mine.json.jobs.map((j: { job_id: string }) => j.job_id)).toEqual([ids[2], ids[1]]);
    const page2 = await call("/api/v1/jobs?limit=2&offset=2", { token: owner.token });
    expect(page2.json.jobs.map((j: { job_id: string }) => j.job_id)).toEqual([ids[0]]);
    const hidden = await call(`/api/v1/jobs?site_id=${other.siteId}`, { token: owner.token });
    expect([hidden.status, hidden.json]).toEqual([404, { detail: `Site with ID '${other.siteId}' not found` }]);
    const bySite = await call(`/jobs?site_id=${siteId}`, { token: owner.token });
    expect(bySite.json.jobs.map((j: { job_id: string }) => j.job_id)).not.toContain(foreign);
    expect(bySite.headers.get("Deprecation")).toBe("true");

    // With no devices every job completes at once; filter by status.
    await runAlarm(siteId);
    await flushHub(siteId);
    expect((await call(`/api/v1/jobs?site_id=${siteId}&status=completed`, { token: owner.token })).json.total).toBe(3);
    expect((await call(`/api/v1/jobs?site_id=${siteId}&status=queued`, { token: owner.token })).json.total).toBe(0);
    expect((await call("/api/v1/jobs?status=nope", { token: owner.token })).status).toBe(422);
    const row = await db().select().from(schema.jobs).where(and(eq(schema.jobs.jobId, ids[0]), eq(schema.jobs.siteId, siteId))).get();
    expect(row!.createdBy).toBe(owner.email);
  });
});
