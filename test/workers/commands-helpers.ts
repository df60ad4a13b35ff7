import { env } from "cloudflare:workers";
import { createExecutionContext, createScheduledController, runDurableObjectAlarm, runInDurableObject, waitOnExecutionContext } from "cloudflare:test";
import { and, asc, eq, sql } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import worker from "../../src/index";
import type { SiteHub } from "../../durable-objects/site-hub";
import { call, db } from "./helpers";
import { deviceHeaders } from "./device-helpers";

export const hub = (siteId: string) => env.SITE_HUB.get(env.SITE_HUB.idFromName(siteId)) as DurableObjectStub<SiteHub>;

/**
 * Alarms also fire on their own in the test runtime; parking the alarm an hour ahead lets
 * runDurableObjectAlarm run it exactly when the test says.
 */
export async function runAlarm(siteId: string) {
  await runInDurableObject(hub(siteId), async (_i, state) => { await state.storage.setAlarm(Date.now() + 3_600_000); });
  return runDurableObjectAlarm(hub(siteId));
}

/** Runs SQL in the site hub's own SQLite (to move stored times into the past). */
export async function hubSql<T = Record<string, unknown>>(siteId: string, query: string, ...args: unknown[]): Promise<T[]> {
  return runInDurableObject(hub(siteId), (instance) =>
    (instance as unknown as { sql: SqlStorage }).sql.exec(query, ...(args as never[])).toArray() as T[]);
}

/** Writes whatever the hub still holds for D1 now, instead of within its one-second window. */
export async function flushHub(siteId: string) {
  await runInDurableObject(hub(siteId), (instance) => (instance as unknown as { outbox: { flush(): Promise<void> } }).outbox.flush());
}

export async function alarmAt(siteId: string) {
  return runInDurableObject(hub(siteId), (_i, state) => state.storage.getAlarm());
}

export async function runCron(at = Date.now()) {
  const ctx = createExecutionContext();
  await worker.scheduled(createScheduledController({ scheduledTime: at, cron: "* * * * *" }), env, ctx);
  await waitOnExecutionContext(ctx);
}

export interface Device { device_id: string; api_key: string }

export const queueCommand = (token: string, deviceId: string, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  call(`/api/v1/devices/${deviceId}/commands`, { method: "POST", token, body, headers });

export const poll = (d: Device, query = "", path = "/api/v1/devices/pending") =>
  call(`${path}${query}`, { headers: deviceHeaders(d.device_id, d.api_key) });

export const ack = (d: Device, commandId: string, path = `/api/v1/commands/${commandId}/ack`) =>
  call(path, { method: "POST", headers: deviceHeaders(d.device_id, d.api_key) });

export const report = (d: Device, commandId: string, body: Record<string, unknown>, path = `/api/v1/commands/${commandId}/status`) =>
  call(path, { method: "PUT", headers: deviceHeaders(d.device_id, d.api_key), body });

/** Audit rows about one command, oldest first. */
export async function commandAudit(commandId: string) {
  return db().select().from(schema.auditLogs)
    .where(sql`json_extract(${schema.auditLogs.eventMetadata}, '$.command_id') = ${commandId}`)
    .orderBy(asc(schema.auditLogs.createdAt), asc(schema.auditLogs.id)).all();
}

export async function auditOfType(siteId: string, eventType: string) {
  return db().select().from(schema.auditLogs)
    .where(and(eq(schema.auditLogs.siteId, siteId), eq(schema.auditLogs.eventType, eventType))).all();
}

/** The hub's live events of one type (the live channel's replay ring). */
export async function liveEvents(siteId: string, type: string) {
  const events = (await hub(siteId).eventsSince(siteId, 0)) as unknown as { type: string; data: unknown }[];
  return events.filter((e) => e.type === type).map((e) => e.data as Record<string, unknown>);
}
