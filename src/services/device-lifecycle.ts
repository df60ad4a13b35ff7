/**
 * Retire, transfer, re-enrol, archive and purge: the operator's lifecycle actions beyond suspend and
 * resume. Each asks the state machine (src/shared/device-lifecycle.ts) first, writes D1 in one batch
 * with its audit event, then tells the site's hub through the same paths suspend uses
 * (`deviceChanged`, and `releaseDevice` for a device that leaves the site's live state).
 * docs/device-lifecycle.md describes what each keeps and drops.
 */
import { and, eq, isNull, sql } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import {
  agents, auditLogs, commandIndex, deviceLifecycleRequests, deviceMetrics, devices, deviceStateHistory, deviceTwins, errorLogs, healthChecks,
  jobExecutions, lifecycleEpochs,
} from "../db/schema";
import { conflict, isUniqueViolation, unprocessable } from "../lib/errors";
import { canonicalJson, newUuid, randomToken, sha256Hex } from "../shared/ids";
import { auditRow } from "../shared/audit-row";
import type { LifecycleAction, LifecycleChange } from "../shared/device-lifecycle";
import { currentDate } from "../lib/clock";
import { siteHub } from "../hub/client";
import { authorizeSite } from "./access";
import { deviceChanged, deviceCreated, deviceRemoved, rememberIssuedKey } from "./device-auth";
import { credentialReplaced } from "./credential-throttle";
import { hashSecret } from "./passwords";
import { startSimulatedAgent } from "./agents";
import { assertLifecycleAllows, type DeviceRow } from "./devices";

/** A new one-time key and its hash for a real device; simulated devices have none. */
async function newKey(device: DeviceRow) {
  if (device.deviceSource !== "real") return { apiKey: undefined, apiKeyHash: null };
  const apiKey = randomToken(32);
  return { apiKey, apiKeyHash: await hashSecret(apiKey) };
}

/** After a new key was stored: the hub and this isolate's caches forget the old one. */
async function keyReplaced(env: Env, device: DeviceRow, siteId: string, apiKey: string | undefined, apiKeyHash: string | null) {
  await deviceChanged(env, siteId, device.deviceId);
  await credentialReplaced(env, "device", device.deviceId);
  if (apiKey && apiKeyHash) await rememberIssuedKey(device.deviceId, apiKey, apiKeyHash);
}

const endEpochs = (db: Db, deviceId: string, at: string) =>
  db.update(lifecycleEpochs).set({ endedAt: at }).where(and(eq(lifecycleEpochs.deviceId, deviceId), isNull(lifecycleEpochs.endedAt)));

function lifecycleHistory(device: DeviceRow, user: AuthUser, next: string, reason: string, at: string, siteId = device.siteId) {
  return {
    deviceId: device.deviceId, siteId, previousState: device.lifecycleState, newState: next,
    changedBy: "user", userId: user.id, source: "lifecycle" as const, reason, timestamp: at,
  };
}

/**
 * Retire (the device is out of service for good but kept for history) or archive (kept read-only):
 * its key is destroyed, its epoch ends, and its site's hub cancels its open commands, stops its
 * agent and forgets its presence. D1 first, so the key is refused from the hub's next read on.
 */
export async function retireDevice(env: Env, db: Db, user: AuthUser, device: DeviceRow, action: "retire" | "archive", reason: string | null, request?: Request): Promise<LifecycleChange> {
  assertLifecycleAllows(device, action);
  const next = action === "retire" ? "retired" : "archived";
  const at = currentDate().toISOString();
  const why = reason ?? (action === "retire" ? "Retired by an operator" : "Archived by an operator");
  await db.batch([
    db.update(devices).set({ lifecycleState: next, apiKeyHash: null, status: "offline", updatedAt: at }).where(eq(devices.deviceId, device.deviceId)),
    endEpochs(db, device.deviceId, at),
    db.insert(deviceStateHistory).values(lifecycleHistory(device, user, next, why, at)),
    db.insert(auditLogs).values(auditRow({
      eventType: action === "retire" ? "device_retired" : "device_archived", description: `Device ${device.deviceId} ${next}: ${why}`,
      userId: user.id, siteId: device.siteId, deviceId: device.deviceId, metadata: { reason, previous_state: device.lifecycleState }, request,
    })),
  ]);
  await deviceChanged(env, device.siteId, device.deviceId);
  const { cancelledCommands } = await siteHub(env, device.siteId).releaseDevice(device.deviceId, {
    reason: `Device ${next}: ${why}`, userId: user.id, drop: "live",
  });
  return {
    action, device_id: device.deviceId, site_id: device.siteId, previous_site_id: null, lifecycle_state: next, epoch_id: null,
    cancelled_commands: cancelledCommands, reason, at,
  };
}

/**
 * Moves a device to another site the caller operates: a new epoch and a new key (shown once), its
 * open commands cancelled in the old site's hub, whose metrics and agent history of it are dropped.
 * Its D1 history (state changes, audit, health checks) keeps the site each row was written for.
 */
export async function transferDevice(
  env: Env, db: Db, user: AuthUser, device: DeviceRow, input: { target_site_id: string; reason: string }, request?: Request,
): Promise<LifecycleChange> {
  assertLifecycleAllows(device, "transfer");
  const from = device.siteId;
  if (input.target_site_id === from) throw conflict(`Device ${device.deviceId} is already in site ${from}`);
  const { site: target } = await authorizeSite(db, user, input.target_site_id, "operator", request);
  const to = target.siteId;
  const { apiKey, apiKeyHash } = await newKey(device);
  const epochId = newUuid();
  const at = currentDate().toISOString();
  const metadata = { from_site_id: from, to_site_id: to, reason: input.reason, epoch_id: epochId };
  const audit = (siteId: string) => db.insert(auditLogs).values(auditRow({
    eventType: "device_transferred", description: `Device ${device.deviceId} transferred from site ${from} to site ${to}: ${input.reason}`,
    userId: user.id, siteId, deviceId: device.deviceId, metadata, request,
  }));
  await db.batch([
    db.update(devices).set({ siteId: to, apiKeyHash, status: "offline", updatedAt: at }).where(eq(devices.deviceId, device.deviceId)),
    endEpochs(db, device.deviceId, at),
    db.insert(lifecycleEpochs).values({ epochId, deviceId: device.deviceId, siteId: to, enrollmentMethod: "transferred", startedAt: at }),
    db.insert(deviceStateHistory).values(lifecycleHistory(device, user, device.lifecycleState, `Transferred from site ${from} to site ${to}: ${input.reason}`, at, to)),
    // Both sites' trails say where it went.
    audit(from),
    audit(to),
  ]);
  deviceCreated(device.deviceId, to);
  await keyReplaced(env, device, from, apiKey, apiKeyHash);
  const { cancelledCommands } = await siteHub(env, from).releaseDevice(device.deviceId, {
    reason: `Device transferred to site ${to}: ${input.reason}`, userId: user.id, drop: "history",
  });
  // After the old hub's last writes: its agent projection goes, its latest sample follows it.
  await db.batch([
    db.delete(agents).where(and(eq(agents.deviceId, device.deviceId), eq(agents.siteId, from))),
    db.update(deviceMetrics).set({ siteId: to }).where(eq(deviceMetrics.deviceId, device.deviceId)),
    // Its own desired document goes with it; the new site's templates apply from now on.
    db.update(deviceTwins).set({ siteId: to }).where(eq(deviceTwins.deviceId, device.deviceId)),
  ]);
  await deviceChanged(env, to, device.deviceId);
  if (device.lifecycleState === "active") await startSimulatedAgent(env, { ...device, siteId: to });
  return {
    action: "transfer", device_id: device.deviceId, site_id: to, previous_site_id: from, lifecycle_state: device.lifecycleState,
    epoch_id: epochId, cancelled_commands: cancelledCommands, reason: input.reason, at, ...(apiKey ? { api_key: apiKey } : {}),
  };
}

/**
 * A device that was wiped (or repaired after retirement) starts again under its own id: a new
 * epoch, a new key shown once (the old one stops working at once), and it is active.
 */
export async function reenrolDevice(env: Env, db: Db, user: AuthUser, device: DeviceRow, reason: string | null, request?: Request): Promise<LifecycleChange> {
  assertLifecycleAllows(device, "reenrol");
  const { apiKey, apiKeyHash } = await newKey(device);
  const epochId = newUuid();
  const at = currentDate().toISOString();
  const why = reason ?? "Re-enrolled by an operator";
  await db.batch([
    db.update(devices).set({ lifecycleState: "active", apiKeyHash, status: "offline", updatedAt: at }).where(eq(devices.deviceId, device.deviceId)),
    endEpochs(db, device.deviceId, at),
    db.insert(lifecycleEpochs).values({ epochId, deviceId: device.deviceId, siteId: device.siteId, enrollmentMethod: "re-enrolled", startedAt: at }),
    db.insert(deviceStateHistory).values(lifecycleHistory(device, user, "active", why, at)),
    db.insert(auditLogs).values(auditRow({
      eventType: "device_reenrolled", description: `Device ${device.deviceId} re-enrolled: ${why}`,
      userId: user.id, siteId: device.siteId, deviceId: device.deviceId, metadata: { reason, previous_state: device.lifecycleState, epoch_id: epochId }, request,
    })),
  ]);
  await keyReplaced(env, device, device.siteId, apiKey, apiKeyHash);
  await startSimulatedAgent(env, device);
  return {
    action: "reenrol", device_id: device.deviceId, site_id: device.siteId, previous_site_id: null, lifecycle_state: "active",
    epoch_id: epochId, cancelled_commands: [], reason, at, ...(apiKey ? { api_key: apiKey } : {}),
  };
}

/**
 * Removes the device: its key first (refused from the next call on), then everything its site's hub
 * holds of it (commands, metrics, agent, presence), then its rows in D1. The audit trail keeps its
 * events, this one included: it is the record of who did what, not the device's data.
 */
export async function purgeDevice(env: Env, db: Db, user: AuthUser, device: DeviceRow, reason: string | null, request?: Request): Promise<LifecycleChange> {
  assertLifecycleAllows(device, "purge");
  const at = currentDate().toISOString();
  await db.update(devices).set({ apiKeyHash: null, updatedAt: at }).where(eq(devices.deviceId, device.deviceId));
  await deviceChanged(env, device.siteId, device.deviceId);
  const { cancelledCommands } = await siteHub(env, device.siteId).releaseDevice(device.deviceId, {
    reason: `Device purged${reason ? `: ${reason}` : ""}`, userId: user.id, drop: "everything",
  });
  const id = device.deviceId;
  await db.batch([
    db.delete(devices).where(eq(devices.deviceId, id)),
    db.delete(deviceTwins).where(eq(deviceTwins.deviceId, id)),
    db.delete(lifecycleEpochs).where(eq(lifecycleEpochs.deviceId, id)),
    db.delete(deviceStateHistory).where(eq(deviceStateHistory.deviceId, id)),
    db.delete(healthChecks).where(eq(healthChecks.deviceId, id)),
    db.delete(deviceMetrics).where(eq(deviceMetrics.deviceId, id)),
    db.delete(agents).where(eq(agents.deviceId, id)),
    db.delete(commandIndex).where(eq(commandIndex.deviceId, id)),
    db.delete(jobExecutions).where(eq(jobExecutions.deviceId, id)),
    db.delete(errorLogs).where(sql`json_extract(${errorLogs.context}, '$.device_id') = ${id}`),
    db.insert(auditLogs).values(auditRow({
      eventType: "device_purged", description: `Device ${id} purged from site ${device.siteId}${reason ? `: ${reason}` : ""}`,
      userId: user.id, siteId: device.siteId, deviceId: id,
      metadata: { reason, previous_state: device.lifecycleState, cancelled_commands: cancelledCommands.length }, request,
    })),
  ]);
  deviceRemoved(id);
  return {
    action: "purge", device_id: id, site_id: device.siteId, previous_site_id: null, lifecycle_state: "purged", epoch_id: null,
    cancelled_commands: cancelledCommands, reason, at,
  };
}

// ---- Idempotency-Key --------------------------------------------------------------------------

/**
 * Runs a lifecycle action once per (user, Idempotency-Key): a repeat with the same request answers
 * what the first did (`replayed`), without its one-time api_key, which is never stored; the same
 * key with another request is 422. Without a key the action simply runs.
 */
export async function onceForKey(
  db: Db, user: AuthUser, device: DeviceRow, action: LifecycleAction, request: unknown, key: string | undefined,
  run: () => Promise<LifecycleChange>,
): Promise<{ change: LifecycleChange; replayed: boolean }> {
  if (!key) return { change: await run(), replayed: false };
  const fingerprint = await sha256Hex(canonicalJson({ device_id: device.deviceId, action, request }));
  const earlier = async () => {
    const row = await db.select().from(deviceLifecycleRequests)
      .where(and(eq(deviceLifecycleRequests.userId, user.id), eq(deviceLifecycleRequests.idempotencyKey, key))).get();
    if (row && row.requestFingerprint !== fingerprint) {
      throw unprocessable([{ loc: ["header", "idempotency-key"], msg: "This Idempotency-Key was already used with a different request", type: "idempotency_mismatch" }]);
    }
    return row;
  };
  const found = await earlier();
  if (found) return { change: found.response, replayed: true };
  const change = await run();
  const { api_key: _shownOnce, ...kept } = change;
  try {
    await db.insert(deviceLifecycleRequests).values({
      userId: user.id, idempotencyKey: key, deviceId: device.deviceId, siteId: change.site_id, action,
      requestFingerprint: fingerprint, statusCode: 200, response: kept,
    });
  } catch (error) {
    // Two requests with one key at once: the other stored its answer first; both acted on a state
    // the machine allowed, so there is nothing to undo.
    if (!isUniqueViolation(error)) throw error;
  }
  return { change, replayed: false };
}
