import { and, eq, isNotNull, isNull, lt } from "drizzle-orm";
import type { AuthDevice, AuthUser, Db, Env } from "../env";
import type { DeviceRow } from "./devices";
import { commandIndex } from "../db/schema";
import { conflict, notFound } from "../lib/errors";
import { COMMAND_RETENTION_MS, type CommandStatus } from "../shared/vocabulary";
import type { CommandReport } from "../shared/hub-contract";
import { siteHub } from "../hub/client";
import { ensureCommandAllowed } from "./consent";

export interface QueueCommandBody {
  command_type: string;
  payload?: Record<string, unknown>;
  ttl_seconds?: number;
}

/** A command for a device, queued in its site's hub on behalf of `user`. */
export async function queueDeviceCommand(env: Env, user: AuthUser, device: DeviceRow, body: QueueCommandBody, idempotencyKey: string | undefined) {
  if (device.lifecycleState !== "active") throw conflict(`Device ${device.deviceId} is ${device.lifecycleState}; it cannot receive commands`);
  ensureCommandAllowed(device, body.command_type, body.payload);
  return siteHub(env, device.siteId).queueCommand({
    deviceId: device.deviceId,
    commandType: body.command_type,
    payload: body.payload,
    ttlSeconds: body.ttl_seconds,
    createdBy: user.email,
    userId: user.id,
    idempotencyKey: idempotencyKey ?? null,
    simulated: device.deviceSource === "simulated",
  });
}

export async function listDeviceCommands(env: Env, device: DeviceRow, q: { status?: CommandStatus; limit: number; offset: number }) {
  return siteHub(env, device.siteId).listCommands(device.deviceId, q);
}

export const commandNotFound = () => notFound("Command not found");

export type CommandEntry = typeof commandIndex.$inferSelect;

/** Where a command lives: the command index names its site, whose hub holds the record. */
export async function findCommandEntry(db: Db, commandId: string): Promise<CommandEntry> {
  const entry = await db.select().from(commandIndex).where(eq(commandIndex.commandId, commandId)).get();
  if (!entry) throw commandNotFound();
  return entry;
}

export async function readCommand(env: Env, entry: CommandEntry) {
  const record = await siteHub(env, entry.siteId).getCommand(entry.commandId);
  if (!record) throw commandNotFound();
  return record;
}

export async function cancelCommand(env: Env, user: AuthUser, entry: CommandEntry) {
  return siteHub(env, entry.siteId).cancelCommand(entry.commandId, { userId: user.id, reason: `cancelled by ${user.email}` });
}

// ---- device side: the device's own site hub is the only place looked at ---------------------

export async function pollCommands(env: Env, device: AuthDevice, waitS: number) {
  return siteHub(env, device.siteId).pollCommands(device.deviceId, waitS);
}

export async function ackCommand(env: Env, device: AuthDevice, commandId: string) {
  return siteHub(env, device.siteId).ackCommand(device.deviceId, commandId);
}

export async function reportCommand(env: Env, device: AuthDevice, commandId: string, report: CommandReport) {
  return siteHub(env, device.siteId).reportCommand(device.deviceId, commandId, report);
}

const RESULT_ALIASES: Record<string, "completed" | "failed"> = {
  completed: "completed", complete: "completed", success: "completed", succeeded: "completed", ok: "completed",
  failed: "failed", failure: "failed", error: "failed",
};

/** `completed` or `failed`; the old agents' `success` / `failure` are read the same way. */
export const resultStatus = (raw: string) => RESULT_ALIASES[raw.trim().toLowerCase()];

// ---- cron -----------------------------------------------------------------------------------

const SWEEP_SITES_PER_RUN = 100;
/** An index row still open a day after its TTL belongs to a command its hub no longer holds. */
const STALE_OPEN_MS = 86_400_000;

/**
 * The safety net behind the hubs' own alarms: every hub holding a command past its TTL that D1 still
 * sees open is told to sweep (expire, audit, close the index row). Idempotent; also prunes index rows
 * of commands the hubs have already pruned.
 */
export async function runCommandMaintenance(env: Env, db: Db, now: Date) {
  const nowIso = now.toISOString();
  const overdue = await db.selectDistinct({ siteId: commandIndex.siteId }).from(commandIndex)
    .where(and(isNull(commandIndex.closedAt), lt(commandIndex.expiresAt, nowIso))).limit(SWEEP_SITES_PER_RUN).all();
  let swept = 0;
  for (const { siteId } of overdue) {
    try {
      await siteHub(env, siteId).sweepCommands();
      swept++;
    } catch (error) {
      console.error(`command sweep of site ${siteId} failed`, error);
    }
  }
  await db.batch([
    db.update(commandIndex).set({ closedAt: nowIso })
      .where(and(isNull(commandIndex.closedAt), lt(commandIndex.expiresAt, new Date(now.getTime() - STALE_OPEN_MS).toISOString()))),
    db.delete(commandIndex)
      .where(and(isNotNull(commandIndex.closedAt), lt(commandIndex.closedAt, new Date(now.getTime() - COMMAND_RETENTION_MS).toISOString()))),
  ]);
  return { overdueSites: overdue.length, swept };
}
