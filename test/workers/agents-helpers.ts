import { expect } from "vitest";
import { env } from "cloudflare:workers";
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import type { SiteHub } from "../../durable-objects/site-hub";
import type { AgentRow } from "../../durable-objects/agent-store";
import { call } from "./helpers";
import { registerDevice } from "./device-helpers";

export const hub = (siteId: string) => env.SITE_HUB.get(env.SITE_HUB.idFromName(siteId)) as DurableObjectStub<SiteHub>;

/**
 * Alarms also fire on their own in the test runtime; parking the alarm an hour ahead lets
 * runDurableObjectAlarm run it exactly when the test says.
 */
export async function parkAlarm(siteId: string) {
  await runInDurableObject(hub(siteId), async (_i, state) => { await state.storage.setAlarm(Date.now() + 3_600_000); });
}

export const alarmOf = (siteId: string) => runInDurableObject(hub(siteId), (_i, state) => state.storage.getAlarm());

/** Runs the hub's alarm now (parked first so the runtime does not run it on its own meanwhile). */
export async function runAlarm(siteId: string) {
  await parkAlarm(siteId);
  return runDurableObjectAlarm(hub(siteId));
}

export const agentRow = (siteId: string, deviceId: string) =>
  runInDurableObject(hub(siteId), (_i, state) => state.storage.sql.exec<AgentRow>("SELECT * FROM agents WHERE device_id = ?", deviceId).toArray()[0]);

export async function setAgent(siteId: string, deviceId: string, set: Record<string, number | string | null>) {
  const keys = Object.keys(set);
  await runInDurableObject(hub(siteId), (_i, state) => {
    state.storage.sql.exec(`UPDATE agents SET ${keys.map((k) => `${k} = ?`).join(", ")} WHERE device_id = ?`, ...keys.map((k) => set[k]), deviceId);
  });
}

/** Makes the agent's current lifecycle step due and runs the alarm: exactly one step happens. */
export async function stepAgent(siteId: string, deviceId: string) {
  await setAgent(siteId, deviceId, { next_at_ms: Date.now() - 1 });
  expect(await runAlarm(siteId)).toBe(true);
  return (await agentRow(siteId, deviceId))!;
}

export async function simulatedDevice(token: string, siteId: string, body: Record<string, unknown> = {}) {
  return registerDevice(token, siteId, { device_source: "simulated", ...body });
}

export const push = (token: string, deviceId: string, body: unknown, prefix = "/api/v1/agents") =>
  call(`${prefix}/${deviceId}/push`, { method: "POST", token, body });

export const liveEvents = async (siteId: string, since = 0) => hub(siteId).eventsSince(siteId, since) as Promise<{ seq: number; type: string; data: any }[]>;
