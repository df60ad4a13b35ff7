import { and, eq, isNotNull, isNull, lt } from "drizzle-orm";
import type { AuthDevice, AuthUser, Db, Env } from "../env";
import { commandIndex } from "../db/schema";
import { ApiError, conflict, notFound } from "../lib/errors";
import { COMMAND_RETENTION_MS, type CommandReport, type CommandStatus, type Outcome } from "../../durable-objects/commands";
import { authorizeDevice } from "./devices";
import { authorizeSite, type Role } from "./access";
import { siteHub } from "./live";
import type { SiteHub } from "../../durable-objects/site-hub";

type CommandHub = Pick<SiteHub, "queueCommand" | "pollCommands" | "ackCommand" | "reportCommand" | "getCommand" | "listCommands" | "cancelCommand" | "sweepCommands">;

/**
 * The site's hub with the command methods' declared types (RPC typing turns records that carry
 * arbitrary JSON — payload, result — into `unknown`; the values are plain structured-clone data).
 */
export const commandHub = (env: Env, siteId: string) => siteHub(env, siteId) as unknown as CommandHub;

/** Turns a hub outcome into the value or the service's error. */
export function unwrap<T>(outcome: Outcome<T>): T {
  if (outcome.ok) return outcome.value;
  const { status, detail, retryAfterS } = outcome.error;
  if (status === 422) throw new ApiError(422, [{ loc: ["body"], msg: detail, type: "value_error" }]);
  throw new ApiError(status, detail, retryAfterS ? { "Retry-After": String(retryAfterS) } : {});
}

export interface QueueCommandBody {
  command_type: string;
  payload?: Record<string, unknown>;
  ttl_seconds?: number;
}

/** An operator (or administrator) queues a command for a device of their site. */
export async function queueDeviceCommand(env: Env, db: Db, user: AuthUser, deviceId: string, body: QueueCommandBody, idempotencyKey: string | undefined, request?: Request) {
  const { device } = await authorizeDevice(db, user, deviceId, "operator", request);
  if (device.lifecycleState !== "active") throw conflict(`Device ${deviceId} is ${device.lifecycleState}; it cannot receive commands`);
  const outcome = await commandHub(env, device.siteId).queueCommand(device.siteId, {
    deviceId,
    commandType: body.command_type,
    payload: body.payload,
    ttlSeconds: body.ttl_seconds,
    createdBy: user.email,
    userId: user.id,
    idempotencyKey: idempotencyKey ?? null,
    simulated: device.deviceSource === "simulated",
  });
  return unwrap(outcome);
}

export async function listDeviceCommands(env: Env, db: Db, user: AuthUser, deviceId: string, q: { status?: CommandStatus; limit: number; offset: number }, request?: Request) {
  const { device } = await authorizeDevice(db, user, deviceId, "viewer", request);
  return commandHub(env, device.siteId).listCommands(device.siteId, deviceId, q);
}

/** Where a command lives (its site's hub), checked against the caller's role on that site. */
async function locateCommand(db: Db, user: AuthUser, commandId: string, minimum: Role, request?: Request) {
  const entry = await db.select().from(commandIndex).where(eq(commandIndex.commandId, commandId)).get();
  if (!entry) throw notFound("Command not found");
  await authorizeSite(db, user, entry.siteId, minimum, request);
  return entry;
}

export async function readCommand(env: Env, db: Db, user: AuthUser, commandId: string, request?: Request) {
  const entry = await locateCommand(db, user, commandId, "viewer", request);
  const record = await commandHub(env, entry.siteId).getCommand(entry.siteId, commandId);
  if (!record) throw notFound("Command not found");
  return record;
}

export async function cancelCommand(env: Env, db: Db, user: AuthUser, commandId: string, request?: Request) {
  const entry = await locateCommand(db, user, commandId, "operator", request);
  return unwrap(await commandHub(env, entry.siteId).cancelCommand(entry.siteId, commandId, { userId: user.id, reason: `cancelled by ${user.email}` }));
}

// ---- device side: the device's own site hub is the only place looked at ---------------------

export async function pollCommands(env: Env, device: AuthDevice, waitS: number) {
  return unwrap(await commandHub(env, device.siteId).pollCommands(device.siteId, device.deviceId, waitS));
}

export async function ackCommand(env: Env, device: AuthDevice, commandId: string) {
  return unwrap(await commandHub(env, device.siteId).ackCommand(device.siteId, device.deviceId, commandId));
}

export async function reportCommand(env: Env, device: AuthDevice, commandId: string, report: CommandReport) {
  return unwrap(await commandHub(env, device.siteId).reportCommand(device.siteId, device.deviceId, commandId, report));
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
      await commandHub(env, siteId).sweepCommands(siteId);
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
