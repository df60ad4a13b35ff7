import { describe, expect, it } from "vitest";
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { and, eq, like } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { admin, call, createSite, db, signup } from "./helpers";
import { hub, liveEvents } from "./agents-helpers";
import { runCron } from "./commands-helpers";
import { deviceHeaders, registerDevice } from "./device-helpers";
import {
  createRollout, installFleetClock, installOrchestratorClock, maxConcurrentPerSite, orchestrator, progressOf, rolloutExecutions, runFleet,
  simulatedFleet, targetRows,
} from "./rollouts-helpers";

const finished = (p: { status: string }) => p.status === "completed" || p.status === "aborted";

describe("rollouts: waves within each site's disruption budget", () => {
  it("rolls an update out to 10 sites × 20 simulated devices in waves, never more than the budget of a site at once", { timeout: 240_000 }, async () => {
    const owner = await signup();
    const { siteIds } = await simulatedFleet(owner.token, 10, 20);
    const clock = await installFleetClock(siteIds);
    const res = await createRollout(owner.token, {
      name: "POS config 2.0", site_ids: siteIds, action: "update_config", payload: { config_version: "2.0.0" },
      waves: { canary_percent: 5, growth: 2, soak_seconds: 30 }, budget: { max_devices_per_site: 2 },
    });
    expect(res.status).toBe(201);
    const rolloutId = res.json.rollout_id as string;
    expect(res.json.settings.abort).toEqual({ max_failure_rate: 0.05, min_executions: 5, max_failures: null, offline_counts_as_failure: true });
    expect(res.json.progress.wave_count).toBe(5); // 10, 20, 40, 80, 50
    expect(res.json.progress.counts.total).toBe(200);
    await installOrchestratorClock(rolloutId, clock);

    const wavesSeen = new Set<number>();
    const done = await runFleet(rolloutId, siteIds, clock, finished, { onStep: (p) => wavesSeen.add(p.current_wave) });
    expect(done.status).toBe("completed");
    expect(done.counts).toMatchObject({ total: 200, succeeded: 200, failed: 0, pending: 0, running: 0 });
    expect([...wavesSeen].sort()).toEqual([1, 2, 3, 4, 5]);

    const rows = await targetRows(rolloutId);
    const peaks = maxConcurrentPerSite(rows);
    expect(Object.keys(peaks).sort()).toEqual([...siteIds].sort());
    for (const siteId of siteIds) expect(peaks[siteId]).toBeLessThanOrEqual(2);
    expect(Math.max(...Object.values(peaks))).toBe(2);
    for (const s of done.sites) expect(s.max_in_flight).toBeLessThanOrEqual(2);

    // Each device ran exactly once, through its site's job machinery.
    const { executions } = await rolloutExecutions(rolloutId);
    expect(executions).toHaveLength(200);
    expect(new Set(executions.map((e) => e.deviceId)).size).toBe(200);
    expect(executions.every((e) => e.status === "completed")).toBe(true);

    // A wave starts only after the one before finished and soaked.
    for (let w = 2; w <= 5; w++) {
      const previousEnd = Math.max(...rows.filter((r) => r.wave === w - 1).map((r) => r.finished_ms!));
      const start = Math.min(...rows.filter((r) => r.wave === w).map((r) => r.started_ms!));
      expect(start - previousEnd).toBeGreaterThanOrEqual(30_000);
    }
    const got = await call(`/api/v1/rollouts/${rolloutId}`, { token: owner.token });
    expect(got.json.status).toBe("completed");
    expect(got.json.progress.waves.map((w: { counts: { succeeded: number } }) => w.counts.succeeded)).toEqual([10, 20, 40, 80, 50]);
    const progressEvents = (await liveEvents(siteIds[0])).filter((e) => e.type === "rollout.progress");
    expect(progressEvents.length).toBeGreaterThan(0);
    expect(progressEvents.at(-1)!.data).toMatchObject({ rollout_id: rolloutId, status: "completed" });
  });

  it("aborts in the canary wave when 30 % of the devices fail, and starts nothing after", { timeout: 120_000 }, async () => {
    const owner = await signup();
    const { siteIds } = await simulatedFleet(owner.token, 5, 10, (i) => i % 10 < 3);
    const clock = await installFleetClock(siteIds);
    const res = await createRollout(owner.token, {
      name: "Bad config", site_ids: siteIds, action: "update_config", payload: { config_version: "9.9.9" },
      waves: { canary_percent: 40, growth: 2, soak_seconds: 0 }, rollback: { action: "restart" },
    });
    expect(res.status).toBe(201);
    const rolloutId = res.json.rollout_id as string;
    await installOrchestratorClock(rolloutId, clock);
    const done = await runFleet(rolloutId, siteIds, clock, finished);
    expect(done.status).toBe("aborted");
    expect(done.current_wave).toBe(1);
    expect(done.abort_reason).toMatch(/^Wave 1: \d+ of \d+ executions failed/);
    for (const wave of done.waves.slice(1)) expect(wave.counts).toMatchObject({ running: 0, succeeded: 0, failed: 0, pending: 0 });
    expect(done.counts.failed).toBeGreaterThan(0);

    const rows = await targetRows(rolloutId);
    expect(rows.filter((r) => r.wave > 1 && r.started_ms !== null)).toEqual([]);
    const { jobs } = await rolloutExecutions(rolloutId);
    const rolloutJobs = jobs.filter((j) => !j.description!.startsWith("Rollback"));
    expect(rolloutJobs.every((j) => j.description!.endsWith("wave 1"))).toBe(true);
    // Nothing of the rollout is left queued in any hub.
    expect(rolloutJobs.filter((j) => j.status === "queued" || j.status === "sent")).toEqual([]);
    const aborted = await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.eventType, "rollout_aborted")).all();
    expect(aborted.filter((a) => (a.eventMetadata as { rollout_id: string }).rollout_id === rolloutId)).toHaveLength(5);
    // The rollback went to the devices that were changed, as jobs of their sites.
    const rollbacks = jobs.filter((j) => j.description!.startsWith("Rollback"));
    expect(rollbacks.length).toBeGreaterThan(0);
    expect(rollbacks.every((j) => j.action === "restart")).toBe(true);
    const changed = rows.filter((r) => r.state === "succeeded" || (r.state === "failed" && r.finished_ms !== null && r.job_id));
    expect(rollbacks.flatMap((j) => j.targetDeviceIds as string[]).length).toBeGreaterThan(0);
    expect(changed.length).toBeGreaterThan(0);
    const row = await db().select().from(schema.rollouts).where(eq(schema.rollouts.rolloutId, rolloutId)).get();
    expect(row!.status).toBe("aborted");
  });
});

describe("rollouts: device consent", () => {
  it("skips a device whose owner has not granted what the action needs: skipped, not failed, and the rollout completes", { timeout: 120_000 }, async () => {
    const owner = await signup();
    const { siteIds } = await simulatedFleet(owner.token, 1, 2);
    const refusing = await registerDevice(owner.token, siteIds[0]!);
    const consent = await call(`/api/v1/devices/device/${refusing.device_id}/permissions`, {
      method: "PATCH", headers: deviceHeaders(refusing.device_id, refusing.api_key),
      body: { permissions: { root_access: false, command_execution: true, process_monitoring: true, filesystem_access: true, network_monitoring: true } },
    });
    expect(consent.status, consent.text).toBe(200);
    const clock = await installFleetClock(siteIds);
    const res = await createRollout(owner.token, { name: "Restart tills", site_ids: siteIds, action: "restart", waves: { canary_percent: 100, soak_seconds: 0 } });
    expect(res.status, res.text).toBe(201);
    const rolloutId = res.json.rollout_id as string;
    await installOrchestratorClock(rolloutId, clock);
    const done = await runFleet(rolloutId, siteIds, clock, finished);
    expect(done.status).toBe("completed");
    expect(done.counts).toMatchObject({ succeeded: 2, skipped: 1, failed: 0 });
    const row = (await targetRows(rolloutId)).find((r) => r.device_id === refusing.device_id);
    expect(row).toMatchObject({ state: "skipped" });
  });
});

describe("rollouts: controls", () => {
  it("pauses, resumes, promotes past the soak and aborts, each audited; a finished rollout refuses controls", { timeout: 120_000 }, async () => {
    const owner = await signup();
    const { siteIds } = await simulatedFleet(owner.token, 2, 3);
    const clock = await installFleetClock(siteIds);
    const res = await createRollout(owner.token, {
      name: "Controlled", site_ids: siteIds, action: "update_config", payload: { config_version: "3.0.0" },
      waves: [{ site_ids: [siteIds[0]] }, { site_ids: [siteIds[1]] }], budget: { max_devices_per_site: 2 },
    });
    expect(res.status).toBe(201);
    const rolloutId = res.json.rollout_id as string;
    expect(res.json.progress).toMatchObject({ status: "running", current_wave: 1, wave_count: 2 });
    expect(res.json.progress.sites[0].counts).toMatchObject({ running: 2, pending: 1 });
    await installOrchestratorClock(rolloutId, clock);

    const paused = await call(`/api/v1/rollouts/${rolloutId}/pause`, { method: "POST", token: owner.token });
    expect(paused.status).toBe(200);
    expect(paused.json.status).toBe("paused");
    // Paused: the two started devices finish, the third does not start.
    let p = await runFleet(rolloutId, siteIds, clock, (x) => x.sites[0].counts.running === 0);
    expect(p.status).toBe("paused");
    expect(p.sites[0].counts).toMatchObject({ succeeded: 2, pending: 1 });
    expect((await call(`/api/v1/rollouts/${rolloutId}/resume`, { method: "POST", token: owner.token })).json.status).toBe("running");
    expect((await call(`/api/v1/rollouts/${rolloutId}/resume`, { method: "POST", token: owner.token })).status).toBe(409);

    // Wave 1 finishes, then soaks (default 300 s); promote skips the soak.
    p = await runFleet(rolloutId, siteIds, clock, (x) => x.soak_until !== null);
    expect(p.current_wave).toBe(1);
    const promoted = await call(`/api/v1/rollouts/${rolloutId}/promote`, { method: "POST", token: owner.token });
    expect(promoted.status).toBe(200);
    expect(promoted.json.progress.current_wave).toBe(2);
    expect(promoted.json.progress.sites[1].counts.running).toBe(2);

    const aborted = await call(`/api/v1/rollouts/${rolloutId}/abort`, { method: "POST", token: owner.token });
    expect(aborted.status).toBe(200);
    expect(aborted.json.status).toBe("aborted");
    expect(aborted.json.abort_reason).toContain(owner.email);
    expect(aborted.json.progress.sites[1].counts).toMatchObject({ pending: 0, running: 0, skipped: 3 });
    for (const kind of ["pause", "resume", "promote", "abort"]) {
      expect((await call(`/api/v1/rollouts/${rolloutId}/${kind}`, { method: "POST", token: owner.token })).status).toBe(409);
    }
    // The second site's job was cancelled in its hub, so its commands are not delivered.
    const { jobs } = await rolloutExecutions(rolloutId);
    const wave2 = jobs.filter((j) => j.siteId === siteIds[1]);
    expect(wave2.length).toBe(1);
    expect(wave2[0].status).toBe("cancelled");

    const audits = await db().select().from(schema.auditLogs)
      .where(and(eq(schema.auditLogs.siteId, siteIds[0]), like(schema.auditLogs.eventType, "rollout_%"))).all();
    const types = audits.map((a) => a.eventType);
    for (const t of ["rollout_created", "rollout_started", "rollout_paused", "rollout_resumed", "rollout_promoted", "rollout_aborted"]) expect(types).toContain(t);
    expect(audits.find((a) => a.eventType === "rollout_paused")!.userId).toBe(owner.id);
  });

  it("starts devices only inside each site's start window, in the site's own time zone", { timeout: 120_000 }, async () => {
    const owner = await signup();
    // A one-hour window two hours from now in UTC; the other site is 5 h 30 ahead, so never in it at the same moment.
    const hour = (new Date().getUTCHours() + 2) % 24;
    const hh = (h: number) => `${String(h % 24).padStart(2, "0")}:00`;
    const { siteIds } = await simulatedFleet(owner.token, 2, 2, () => false, (i) => ({ time_zone: i === 0 ? "UTC" : "Asia/Kolkata" }));
    const clock = await installFleetClock(siteIds);
    const res = await createRollout(owner.token, {
      name: "Night window", site_ids: siteIds, action: "restart", waves: [{ percent: 100 }], window: { start_local: hh(hour), end_local: hh(hour + 1) },
    });
    expect(res.status).toBe(201);
    const rolloutId = res.json.rollout_id as string;
    expect(res.json.progress).toMatchObject({ status: "scheduled", current_wave: 0 });
    expect(res.json.progress.counts.pending).toBe(4);
    await installOrchestratorClock(rolloutId, clock);
    // Into the window: the start of `hour` UTC, plus a minute.
    const target = new Date();
    target.setUTCHours(hour, 1, 0, 0);
    if (target.getTime() < clock.now()) target.setUTCDate(target.getUTCDate() + 1);
    clock.advance(target.getTime() - clock.now());
    expect(await runDurableObjectAlarm(orchestrator(rolloutId))).toBe(true);
    const p = await progressOf(rolloutId);
    expect(p.status).toBe("running");
    expect(p.sites[0].counts.running).toBe(2);
    expect(p.sites[1].counts).toMatchObject({ running: 0, pending: 2 });
  });

  it("an orchestrator restarted mid-wave loses nothing and starts nothing twice", { timeout: 240_000 }, async () => {
    const owner = await signup();
    const { siteIds } = await simulatedFleet(owner.token, 3, 6);
    const clock = await installFleetClock(siteIds);
    const res = await createRollout(owner.token, {
      name: "Restart me", site_ids: siteIds, action: "update_config", payload: { config_version: "4.0.0" },
      waves: { canary_percent: 50, growth: 2, soak_seconds: 0 },
    });
    const rolloutId = res.json.rollout_id as string;
    await installOrchestratorClock(rolloutId, clock);
    await runFleet(rolloutId, siteIds, clock, (x) => x.counts.succeeded >= 2);
    const before = await progressOf(rolloutId);
    expect(before.counts.running).toBeGreaterThan(0);
    // The instance goes away (as on an eviction or a deploy); a new one starts from its storage.
    await expect(runInDurableObject(orchestrator(rolloutId), (_o, state) => state.abort("restart"))).rejects.toThrow();
    const after = await progressOf(rolloutId);
    expect(after.counts).toEqual(before.counts);
    await installOrchestratorClock(rolloutId, clock);
    // Also the cron's re-drive, twice, on top of the alarm: repeats change nothing.
    await orchestrator(rolloutId).drive();
    await orchestrator(rolloutId).drive();
    const done = await runFleet(rolloutId, siteIds, clock, finished);
    expect(done.status).toBe("completed");
    expect(done.counts).toMatchObject({ total: 18, succeeded: 18 });
    const { executions } = await rolloutExecutions(rolloutId);
    expect(executions).toHaveLength(18);
    expect(new Set(executions.map((e) => e.deviceId)).size).toBe(18);
    for (const peak of Object.values(maxConcurrentPerSite(await targetRows(rolloutId)))) expect(peak).toBeLessThanOrEqual(2);
  });
});

describe("rollouts: access and input", () => {
  const grant = (adminToken: string, siteId: string, userId: number, role: string) =>
    call(`/api/v1/sites/${siteId}/members`, { method: "POST", token: adminToken, body: { user_id: userId, role } });
  const rolloutsNamed = async (name: string) => (await db().select().from(schema.rollouts).where(eq(schema.rollouts.name, name)).all()).length;

  it("needs the operator role on every targeted site (403, or 404 with none) and refuses before creating anything", async () => {
    const a = await admin();
    const owner = await signup();
    const { siteIds: [siteA, siteB] } = await simulatedFleet(owner.token, 2, 2);
    const operator = await signup();
    const outsider = await signup();
    await grant(a.token, siteA, operator.id, "operator");
    await grant(a.token, siteB, operator.id, "viewer");
    const body = (name: string, site_ids: string[]) => ({ name, site_ids, action: "restart" });

    const forbidden = await createRollout(operator.token, body("refused-403", [siteA, siteB]));
    expect(forbidden.status).toBe(403);
    const hidden = await createRollout(outsider.token, body("refused-404", [siteA]));
    expect(hidden.status).toBe(404);
    expect(await rolloutsNamed("refused-403")).toBe(0);
    expect(await rolloutsNamed("refused-404")).toBe(0);

    const created = await createRollout(operator.token, { ...body("allowed", [siteA]), waves: { soak_seconds: 600 } });
    expect(created.status).toBe(201);
    const id = created.json.rollout_id as string;
    // Visible to whoever has a role on one of its sites; steered only by an operator of all of them.
    const viewer = await signup();
    await grant(a.token, siteA, viewer.id, "viewer");
    expect((await call(`/api/v1/rollouts/${id}`, { token: viewer.token })).status).toBe(200);
    expect((await call(`/api/v1/rollouts/${id}/pause`, { method: "POST", token: viewer.token })).status).toBe(403);
    expect((await call(`/api/v1/rollouts/${id}`, { token: outsider.token })).status).toBe(404);
    for (const kind of ["pause", "resume", "promote", "abort"]) {
      expect((await call(`/api/v1/rollouts/${id}/${kind}`, { method: "POST", token: outsider.token })).status).toBe(404);
    }
    expect((await call("/api/v1/rollouts/rol-000000000000", { token: a.token })).status).toBe(404);
    const listed = (token: string) => call("/api/v1/rollouts", { token }).then((r) => r.json.rollouts.map((x: { rollout_id: string }) => x.rollout_id));
    expect(await listed(viewer.token)).toContain(id);
    expect(await listed(outsider.token)).not.toContain(id);
    expect(await listed(a.token)).toContain(id);
    expect((await progressOf(id)).status).toBe("running");
    expect((await call(`/api/v1/rollouts/${id}/abort`, { method: "POST", token: operator.token })).status).toBe(200);
  });

  it("targets every site of a tenant for its owner only", async () => {
    const a = await admin();
    const tenant = await call("/api/v1/tenants", { method: "POST", token: a.token, body: { name: "Chain" } });
    const tenantId = tenant.json.tenant_id as string;
    const tenantOwner = await signup();
    const tenantOperator = await signup();
    await call(`/api/v1/tenants/${tenantId}/members`, { method: "POST", token: a.token, body: { user_id: tenantOwner.id, role: "owner" } });
    await call(`/api/v1/tenants/${tenantId}/members`, { method: "POST", token: a.token, body: { user_id: tenantOperator.id, role: "operator" } });
    const { siteIds } = await simulatedFleet(tenantOwner.token, 2, 1, () => false, () => ({ tenant_id: tenantId }));
    const body = { name: "chain-wide", tenant_id: tenantId, action: "restart" };
    expect((await createRollout(tenantOperator.token, body)).status).toBe(403);
    expect((await createRollout((await signup()).token, body)).status).toBe(404);
    expect(await rolloutsNamed("chain-wide")).toBe(0);
    const created = await createRollout(tenantOwner.token, body);
    expect(created.status).toBe(201);
    expect([...created.json.site_ids].sort()).toEqual([...siteIds].sort());
    expect(created.json.total_devices).toBe(2);
  });

  it("answers 422 to bad input and changes nothing; an Idempotency-Key makes a retry safe", async () => {
    const owner = await signup();
    const { siteIds } = await simulatedFleet(owner.token, 1, 3);
    const base = { name: "input", site_ids: siteIds, action: "restart", waves: { soak_seconds: 600 } };
    const bad: Record<string, unknown>[] = [
      { ...base, tenant_id: "T-1" },
      { name: "input", action: "restart" },
      { ...base, window: { start_local: "25:00", end_local: "03:00" } },
      { ...base, budget: { max_devices_per_site: 2, max_percent_per_site: 10 } },
      { ...base, abort: { max_failure_rate: 2 } },
      { ...base, waves: [{ site_ids: ["ELSEWHERE"] }] },
      { ...base, waves: [{ percent: 10, site_ids: siteIds }] },
      { ...base, device_filter: { device_type: "kiosk" } },
      { ...base, payload: { config_url: "http://plain.example.com/c.json" } },
    ];
    for (const body of bad) {
      const res = await createRollout(owner.token, body);
      expect(res.status, JSON.stringify(body)).toBe(422);
    }
    expect(await rolloutsNamed("input")).toBe(0);
    expect((await call("/api/v1/sites/sites", { method: "POST", token: owner.token, body: { name: "Moon", time_zone: "Mars/Olympus" } })).status).toBe(422);
    const paris = await createSite(owner.token, { time_zone: "Europe/Paris" });
    expect((await call(`/api/v1/sites/${paris}`, { token: owner.token })).json.time_zone).toBe("Europe/Paris");

    const key = { "Idempotency-Key": "roll-once" };
    const first = await createRollout(owner.token, base, key);
    expect(first.status).toBe(201);
    const again = await createRollout(owner.token, { action: "restart", waves: { soak_seconds: 600 }, site_ids: siteIds, name: "input" }, key);
    expect(again.status).toBe(201);
    expect(again.headers.get("Idempotent-Replayed")).toBe("true");
    expect(again.json.rollout_id).toBe(first.json.rollout_id);
    expect((await createRollout(owner.token, { ...base, name: "other" }, key)).status).toBe(422);
    expect(await rolloutsNamed("input")).toBe(1);
  });
});

describe("site time zones", () => {
  it("are set by the site's owner, checked against the time zone database, and used by new rollouts", async () => {
    const a = await admin();
    const owner = await signup();
    const { siteIds: [siteId] } = await simulatedFleet(owner.token, 1, 1);
    const operator = await signup();
    await call(`/api/v1/sites/${siteId}/members`, { method: "POST", token: a.token, body: { user_id: operator.id, role: "operator" } });
    const put = (token: string, time_zone: unknown) => call(`/api/v1/sites/${siteId}/time-zone`, { method: "PUT", token, body: { time_zone } });
    expect((await put(owner.token, "Atlantis/Lost")).status).toBe(422);
    expect((await put(owner.token, "")).status).toBe(422);
    expect((await put(operator.token, "Europe/Paris")).status).toBe(403);
    expect((await put((await signup()).token, "Europe/Paris")).status).toBe(404);
    expect((await call(`/api/v1/sites/${siteId}`, { token: owner.token })).json.time_zone).toBe("UTC");
    const set = await put(owner.token, "America/New_York");
    expect(set.status).toBe(200);
    expect(set.json.time_zone).toBe("America/New_York");
    const audit = await db().select().from(schema.auditLogs).where(and(eq(schema.auditLogs.siteId, siteId), eq(schema.auditLogs.eventType, "site_updated"))).all();
    expect(audit).toHaveLength(1);
    expect(audit[0].userId).toBe(owner.id);
    const rollout = await createRollout(owner.token, { name: "tz", site_ids: [siteId], action: "restart", window: { start_local: "02:00", end_local: "05:00" } });
    const row = await db().select().from(schema.rollouts).where(eq(schema.rollouts.rolloutId, rollout.json.rollout_id)).get();
    expect((row!.plan as { sites: { timeZone: string }[] }).sites[0].timeZone).toBe("America/New_York");
  });
});

describe("rollouts: the minute cron", () => {
  it("re-drives a rollout whose alarm was lost, and hands its plan to an orchestrator that never got it", { timeout: 60_000 }, async () => {
    const owner = await signup();
    const { siteIds: [siteId] } = await simulatedFleet(owner.token, 1, 2);
    const clock = await installFleetClock([siteId]);
    const res = await createRollout(owner.token, { name: "cron", site_ids: [siteId], action: "restart", waves: [{ percent: 100 }], budget: { max_devices_per_site: 1 } });
    const rolloutId = res.json.rollout_id as string;
    expect(res.json.progress.counts).toMatchObject({ running: 1, pending: 1 });
    await runInDurableObject(orchestrator(rolloutId), (_o, state) => state.storage.deleteAlarm());
    // The first device reboots and comes back; nobody wakes the orchestrator but the cron.
    for (let i = 0; i < 6; i++) {
      clock.advance(10_000);
      await runDurableObjectAlarm(hub(siteId));
    }
    const stale = new Date(Date.now() - 120_000).toISOString();
    await db().update(schema.rollouts).set({ updatedAt: stale }).where(eq(schema.rollouts.rolloutId, rolloutId));
    expect((await progressOf(rolloutId)).counts).toMatchObject({ running: 1, succeeded: 0 });
    await runCron();
    expect((await progressOf(rolloutId)).counts).toMatchObject({ succeeded: 1, running: 1 });

    // A rollout stored in D1 whose orchestrator never received the plan.
    const row = (await db().select().from(schema.rollouts).where(eq(schema.rollouts.rolloutId, rolloutId)).get())!;
    const orphanId = `${rolloutId}-orphan`;
    const plan = { ...(row.plan as { rolloutId: string }), rolloutId: orphanId, targets: [] };
    await db().insert(schema.rollouts).values({ ...row, id: undefined, rolloutId: orphanId, plan, status: "scheduled", idempotencyKey: null, updatedAt: stale });
    expect(await orchestrator(orphanId).getProgress()).toBeNull();
    await runCron();
    const adopted = await progressOf(orphanId);
    expect(adopted.rollout_id).toBe(orphanId);
    expect(adopted.status).toBe("completed");
  });
});
