import { env } from "cloudflare:workers";
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { eq, sql } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import type { RolloutOrchestrator } from "../../durable-objects/rollout-orchestrator";
import type { RolloutProgress } from "../../src/shared/rollout-contract";
import { ManualClock, installClock } from "./clock";
import { hub } from "./agents-helpers";
import { call, createSite, db, unique } from "./helpers";

export const orchestrator = (rolloutId: string) => env.ROLLOUTS.get(env.ROLLOUTS.idFromName(rolloutId)) as DurableObjectStub<RolloutOrchestrator>;

/**
 * A fleet of simulated agents: `perSite` devices in each of `sites` new sites, written straight to D1
 * (registering each through the API would cost a bcrypt per device), then each hub brings its agents
 * up. `failing(i)` says which devices (by index in their site) fail every update; the others never do.
 */
export async function simulatedFleet(token: string, sites: number, perSite: number, failing: (index: number) => boolean = () => false, siteBody: (i: number) => Record<string, unknown> = () => ({})) {
  const siteIds: string[] = [];
  for (let s = 0; s < sites; s++) siteIds.push(await createSite(token, { site_id: unique(`RO${s}-`), ...siteBody(s) }));
  const devices: Record<string, string[]> = {};
  for (const siteId of siteIds) {
    const ids = Array.from({ length: perSite }, (_, i) => `${siteId}-D${String(i).padStart(3, "0")}`);
    devices[siteId] = ids;
    for (let i = 0; i < ids.length; i += 10) {
      await db().insert(schema.devices).values(ids.slice(i, i + 10).map((deviceId) => ({
        deviceId, siteId, name: `Till ${deviceId}`, deviceType: "pos_terminal", deviceSource: "simulated" as const, lifecycleState: "active" as const,
      })));
    }
    await hub(siteId).siteHealth(siteId);
    await runInDurableObject(hub(siteId), (_i, state) => {
      ids.forEach((id, i) => state.storage.sql.exec("UPDATE agents SET failure_rate = ? WHERE device_id = ?", failing(i) ? 1 : 0, id));
    });
  }
  return { siteIds, devices };
}

/** One clock for every hub of the fleet and the orchestrator: time moves only when the test says. */
export async function installFleetClock(siteIds: string[], clock = new ManualClock()) {
  for (const siteId of siteIds) await installClock(siteId, clock);
  return clock;
}

export async function installOrchestratorClock(rolloutId: string, clock: ManualClock) {
  // The orchestrator has no fetch handler, so the pool's typing does not see it as a Durable Object class.
  await runInDurableObject(orchestrator(rolloutId), (instance) => { (instance as unknown as RolloutOrchestrator).clock = clock; });
}

export const progressOf = async (rolloutId: string) => (await orchestrator(rolloutId).getProgress()) as RolloutProgress;

/**
 * Moves time in steps: each step every hub runs its due work, then the orchestrator its tick.
 * Stops when `until` holds (returns the progress) or after `maxSteps` (throws).
 */
export async function runFleet(rolloutId: string, siteIds: string[], clock: ManualClock, until: (p: RolloutProgress) => boolean, { maxSteps = 400, stepMs = 5_000, onStep }: { maxSteps?: number; stepMs?: number; onStep?: (p: RolloutProgress) => void } = {}) {
  for (let step = 0; step < maxSteps; step++) {
    clock.advance(stepMs);
    for (const siteId of siteIds) await runDurableObjectAlarm(hub(siteId));
    await runDurableObjectAlarm(orchestrator(rolloutId));
    const p = await progressOf(rolloutId);
    onStep?.(p);
    if (until(p)) return p;
  }
  throw new Error(`rollout ${rolloutId} did not reach the condition in ${maxSteps} steps: ${JSON.stringify(await progressOf(rolloutId))}`);
}

/** The orchestrator's record of each device: when it started and when it finished (executing or recovering in between). */
export const targetRows = (rolloutId: string) => runInDurableObject(orchestrator(rolloutId), (_o, state) =>
  state.storage.sql.exec<{ device_id: string; site_id: string; wave: number; state: string; job_id: string | null; started_ms: number | null; finished_ms: number | null }>(
    "SELECT device_id, site_id, wave, state, job_id, started_ms, finished_ms FROM rollout_targets").toArray());

/** The most devices of each site in flight at once, from the recorded start and finish of each. */
export function maxConcurrentPerSite(rows: { site_id: string; started_ms: number | null; finished_ms: number | null }[]) {
  const events = new Map<string, { t: number; d: number }[]>();
  for (const r of rows) {
    if (r.started_ms === null) continue;
    const list = events.get(r.site_id) ?? [];
    list.push({ t: r.started_ms, d: 1 });
    if (r.finished_ms !== null) list.push({ t: r.finished_ms, d: -1 });
    events.set(r.site_id, list);
  }
  const peaks: Record<string, number> = {};
  for (const [siteId, list] of events) {
    // A device released at t frees its place for one started at the same t.
    list.sort((a, b) => a.t - b.t || a.d - b.d);
    let now = 0;
    let peak = 0;
    for (const e of list) peak = Math.max(peak, (now += e.d));
    peaks[siteId] = peak;
  }
  return peaks;
}

/** The D1 job executions of a rollout's jobs. */
export async function rolloutExecutions(rolloutId: string) {
  const jobs = await db().select().from(schema.jobs).where(eq(schema.jobs.rolloutId, rolloutId)).all();
  if (!jobs.length) return { jobs, executions: [] };
  const executions = await db().select().from(schema.jobExecutions)
    .where(sql`${schema.jobExecutions.jobId} IN (SELECT value FROM json_each(${JSON.stringify(jobs.map((j) => j.jobId))}))`).all();
  return { jobs, executions };
}

export const createRollout = (token: string, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  call("/api/v1/rollouts", { method: "POST", token, body, headers });
