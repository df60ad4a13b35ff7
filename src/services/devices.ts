import { and, desc, eq, sql } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { auditLogs, devices, deviceStateHistory, lifecycleEpochs, siteBootstrapKeys } from "../db/schema";
import { badRequest, conflict, forbidden, notFound, unauthorized } from "../lib/errors";
import { randomToken, sameDigest, sha256Hex } from "../shared/ids";
import { recordAudit } from "./audit";
import { auditRow } from "../shared/audit-row";
import { accessibleSiteIds, findSite } from "./access";
import { deviceChanged, rememberIssuedKey } from "./device-auth";
import { siteHub } from "../hub/client";
import { hashSecret, verifySecret } from "./passwords";
import { deviceNameTaken, registerDevice, type DeviceRegistrationInput } from "./device-registry";
import { clientOfRequest, credentialReplaced, verifyThrottled } from "./credential-throttle";
import { currentDate } from "../lib/clock";
import { platformForOs, type VendorPlatformId } from "./vendor-push";
import { isEditable, lifecycleStep, type LifecycleAction } from "../shared/device-lifecycle";

export type DeviceRow = typeof devices.$inferSelect;

export const findDevice = (db: Db, deviceId: string) => db.select().from(devices).where(eq(devices.deviceId, deviceId)).get();

/**
 * A site's devices, newest first, from its hub's roster (docs/architecture.md, "The site roster"),
 * as a JSON body already checked against the hub contract.
 */
export async function siteDevicesBody(env: Env, siteId: string) {
  return siteHub(env, siteId).siteDevicesBody();
}

/** Site health (counts by live status and the device list), from its hub's roster. */
export async function siteHealth(env: Env, siteId: string) {
  return siteHub(env, siteId).siteHealth();
}

/** A device row changed in D1 in a way its site's device list shows: the hub's roster re-reads it. */
export async function deviceListChanged(env: Env, siteId: string, deviceId: string) {
  await siteHub(env, siteId).rosterChanged(deviceId);
}

export async function listAccessibleDevices(db: Db, user: AuthUser, filter: { siteId?: string; status?: string; limit: number; offset: number }) {
  const visible = await accessibleSiteIds(db, user);
  if (visible && visible.length === 0) return { rows: [], total: 0 };
  let siteFilter = visible;
  if (filter.siteId) siteFilter = !visible || visible.includes(filter.siteId) ? [filter.siteId] : [];
  if (siteFilter && siteFilter.length === 0) return { rows: [], total: 0 };
  // Accessible sites are bound through json_each: one parameter however many sites a user has.
  const where = and(
    siteFilter ? sql`${devices.siteId} IN (SELECT value FROM json_each(${JSON.stringify(siteFilter)}))` : undefined,
    filter.status ? eq(devices.status, filter.status) : undefined,
  );
  const [rows, count] = await Promise.all([
    db.select().from(devices).where(where).orderBy(desc(devices.createdAt), desc(devices.id)).limit(filter.limit).offset(filter.offset).all(),
    db.select({ n: sql<number>`count(*)` }).from(devices).where(where).get(),
  ]);
  return { rows, total: count?.n ?? 0 };
}

export async function createSiteDevice(env: Env, db: Db, user: AuthUser, input: Omit<DeviceRegistrationInput, "enrollmentMethod" | "createdBy">, request?: Request) {
  const registered = await registerDevice(db, { ...input, enrollmentMethod: "manual", createdBy: user.id }, request);
  await deviceListChanged(env, input.siteId, registered.deviceId);
  return registered;
}

export interface DeviceUpdate {
  name?: string;
  device_type?: string;
  ip_address?: string | null;
  os_type?: string | null;
  os_version?: string | null;
  heartbeat_interval_s?: number;
}

export async function updateDevice(env: Env, db: Db, user: AuthUser, device: DeviceRow, update: DeviceUpdate, request?: Request) {
  if (!isEditable(device.lifecycleState)) throw conflict(`Device is ${device.lifecycleState}; it cannot be changed`);
  const set = {
    name: update.name,
    deviceType: update.device_type,
    ipAddress: update.ip_address,
    osType: update.os_type,
    osVersion: update.os_version,
    heartbeatIntervalS: update.heartbeat_interval_s,
    updatedAt: currentDate().toISOString(),
  };
  const changed = Object.entries(update).filter(([, v]) => v !== undefined).map(([k]) => k);
  const [[row]] = await db.batch([
    db.update(devices).set(set).where(eq(devices.deviceId, device.deviceId)).returning(),
    db.insert(auditLogs).values(auditRow({
      eventType: "device_updated", description: `Device ${device.deviceId} updated: ${changed.join(", ")}`,
      userId: user.id, siteId: device.siteId, deviceId: device.deviceId, metadata: { changed: update }, request,
    })),
  ]);
  // Presence reads the configured heartbeat interval from the hub's copy of the device; its twin, the
  // device type (which tenant template applies).
  if (update.heartbeat_interval_s !== undefined || update.device_type !== undefined) await deviceChanged(env, device.siteId, device.deviceId);
  else await deviceListChanged(env, device.siteId, device.deviceId);
  return row;
}

/** Issues a new api_key; the old one stops working on the next call (the hash it matched is gone). */
export async function rotateDeviceKey(env: Env, db: Db, user: AuthUser, device: DeviceRow, request?: Request) {
  if (device.deviceSource !== "real") throw badRequest("Simulated devices have no API key");
  // A retired device gets a key back only by re-enrolment, which also starts a new epoch.
  if (!isEditable(device.lifecycleState)) throw conflict(`Device is ${device.lifecycleState}; re-enrol it for a new key`);
  const apiKey = randomToken(32);
  const apiKeyHash = await hashSecret(apiKey);
  const rotatedAt = currentDate().toISOString();
  await db.batch([
    db.update(devices).set({ apiKeyHash, updatedAt: rotatedAt }).where(eq(devices.deviceId, device.deviceId)),
    db.insert(auditLogs).values(auditRow({
      eventType: "device_key_rotated", description: `API key of ${device.deviceId} rotated`, userId: user.id,
      siteId: device.siteId, deviceId: device.deviceId, request,
    })),
  ]);
  await deviceChanged(env, device.siteId, device.deviceId);
  await credentialReplaced(env, "device", device.deviceId);
  await rememberIssuedKey(device.deviceId, apiKey, apiKeyHash);
  return { apiKey, rotatedAt };
}

/** The state `action` leads to, or 409 when the device's state does not allow it (src/shared/device-lifecycle.ts). */
export function assertLifecycleAllows(device: DeviceRow, action: LifecycleAction) {
  const step = lifecycleStep(device.lifecycleState, action);
  if (!step.allowed) throw conflict(step.reason);
  return step.next;
}

export async function setLifecycle(env: Env, db: Db, user: AuthUser, device: DeviceRow, state: "active" | "suspended", request?: Request) {
  if (assertLifecycleAllows(device, state === "suspended" ? "suspend" : "resume") === device.lifecycleState) return device;
  const at = currentDate().toISOString();
  const [[row]] = await db.batch([
    db.update(devices).set({ lifecycleState: state, updatedAt: at }).where(eq(devices.deviceId, device.deviceId)).returning(),
    db.insert(auditLogs).values(auditRow({
      eventType: state === "suspended" ? "device_suspended" : "device_resumed",
      description: `Device ${device.deviceId} ${state === "suspended" ? "suspended" : "resumed"}`,
      userId: user.id, siteId: device.siteId, deviceId: device.deviceId, request,
    })),
    // The device's timeline shows lifecycle changes beside its presence transitions.
    db.insert(deviceStateHistory).values({
      deviceId: device.deviceId, siteId: device.siteId, previousState: device.lifecycleState, newState: state,
      changedBy: "user", userId: user.id, source: "lifecycle", reason: state === "suspended" ? "Suspended by an operator" : "Resumed by an operator",
      timestamp: at,
    }),
  ]);
  await deviceChanged(env, device.siteId, device.deviceId);
  if (state === "suspended") await siteHub(env, device.siteId).forgetDevice(device.deviceId);
  return row;
}

export interface DeviceDna {
  mac_address?: string;
  local_ip?: string;
  hostname?: string;
  os_details?: string;
  os_type?: string;
  os_version?: string;
  firmware?: string;
  firmware_version?: string;
  [key: string]: unknown;
}

/**
 * A vendor push token in the DNA (`device_token`) and its platform: `push_platform` when the device
 * names fcm or apns, else what its OS points to. Undefined leaves what the device row has.
 */
function pushRegistration(dna: DeviceDna): { pushToken: string; pushPlatform: VendorPlatformId | null } | undefined {
  if (typeof dna.device_token !== "string" || !dna.device_token) return undefined;
  const named = dna.push_platform === "fcm" || dna.push_platform === "apns" ? dna.push_platform : undefined;
  return { pushToken: dna.device_token, pushPlatform: named ?? platformForOs(`${dna.os_type ?? ""} ${dna.os_details ?? ""}`) };
}

/** DNA arrives at boot, not on the hot path: written straight to the device row, which is answered. */
export async function recordDeviceDna(env: Env, db: Db, device: { deviceId: string; siteId: string }, dna: DeviceDna) {
  const { deviceId } = device;
  const at = currentDate().toISOString();
  const [row] = await db.update(devices).set({
    ...pushRegistration(dna),
    macAddress: dna.mac_address,
    localIp: dna.local_ip,
    hostname: dna.hostname,
    osDetails: dna.os_details,
    osType: dna.os_type,
    osVersion: dna.os_version,
    firmware: dna.firmware ?? dna.firmware_version,
    dna,
    dnaUpdatedAt: at,
    updatedAt: at,
  }).where(eq(devices.deviceId, deviceId)).returning();
  await deviceListChanged(env, device.siteId, deviceId);
  return row;
}

// ---- bootstrap keys -------------------------------------------------------------------------

export async function createBootstrapKey(env: Env, db: Db, user: AuthUser, siteId: string, request?: Request) {
  const bootstrapKey = `bk_${randomToken(32)}`;
  const keyHash = await hashSecret(bootstrapKey);
  const now = currentDate().toISOString();
  const [, [row]] = await db.batch([
    db.update(siteBootstrapKeys).set({ revokedAt: now }).where(and(eq(siteBootstrapKeys.siteId, siteId), sql`${siteBootstrapKeys.revokedAt} IS NULL`)),
    db.insert(siteBootstrapKeys).values({ siteId, keyHash, createdBy: user.id, createdAt: now }).returning(),
    db.insert(auditLogs).values(auditRow({ eventType: "bootstrap_key_created", description: `Bootstrap key for ${siteId} created (previous key revoked)`, userId: user.id, siteId, request })),
  ]);
  await credentialReplaced(env, "bootstrap", siteId);
  return { bootstrapKey, createdAt: row.createdAt };
}

export async function revokeBootstrapKey(db: Db, user: AuthUser, siteId: string, request?: Request) {
  const now = currentDate().toISOString();
  const revoked = await db.update(siteBootstrapKeys).set({ revokedAt: now })
    .where(and(eq(siteBootstrapKeys.siteId, siteId), sql`${siteBootstrapKeys.revokedAt} IS NULL`)).returning().all();
  if (!revoked.length) throw notFound("This site has no active bootstrap key");
  await recordAudit(db, { eventType: "bootstrap_key_revoked", description: `Bootstrap key for ${siteId} revoked`, userId: user.id, siteId, request });
  return now;
}

const BOOTSTRAP_FAILED = "Invalid site or bootstrap key";
const BOOTSTRAP_THROTTLED = "Too many failed bootstrap enrolments for this site; try again later";

export interface BootstrapProvisionInput {
  site_id: string;
  bootstrap_key: string;
  device_name: string;
  device_type?: string;
  os_details?: string;
}

/**
 * Per isolate: the bootstrap key that last passed bcrypt for a site (its SHA-256, and the hash it
 * matched), so a store enrolling its tills with one key costs one bcrypt, not one per till.
 */
const verifiedBootstrapKeys = new Map<string, { keyHash: string; keyDigest: string }>();
const MAX_VERIFIED_BOOTSTRAP_KEYS = 10_000;

async function bootstrapKeyMatches(db: Db, siteId: string, bootstrapKey: string): Promise<boolean> {
  const active = await db.select().from(siteBootstrapKeys)
    .where(and(eq(siteBootstrapKeys.siteId, siteId), sql`${siteBootstrapKeys.revokedAt} IS NULL`))
    .orderBy(desc(siteBootstrapKeys.createdAt)).get();
  if (!active) return false;
  const keyDigest = await sha256Hex(bootstrapKey);
  const known = verifiedBootstrapKeys.get(siteId);
  if (known && known.keyHash === active.keyHash && sameDigest(known.keyDigest, keyDigest)) return true;
  if (!(await verifySecret(bootstrapKey, active.keyHash))) return false;
  verifiedBootstrapKeys.delete(siteId);
  if (verifiedBootstrapKeys.size >= MAX_VERIFIED_BOOTSTRAP_KEYS) verifiedBootstrapKeys.delete(verifiedBootstrapKeys.keys().next().value!);
  verifiedBootstrapKeys.set(siteId, { keyHash: active.keyHash, keyDigest });
  return true;
}

/**
 * A device enrols itself with the site's bootstrap key: the key is its only credential. The key
 * check is throttled per site and client address (verifyThrottled) before any read or bcrypt; a
 * site without an active key fails the same way as a wrong key, only faster (docs/security.md says
 * why that is acceptable). A verified key then takes one of the site's hourly enrolment slots
 * (`perHour`, from BOOTSTRAP_ENROLMENTS_PER_HOUR), which its hub hands out atomically.
 */
export async function bootstrapProvision(env: Env, db: Db, input: BootstrapProvisionInput, perHour: number, request?: Request) {
  const siteId = input.site_id;
  const check = { kind: "bootstrap" as const, id: siteId, client: clientOfRequest(request), refusal: BOOTSTRAP_THROTTLED };
  if (!(await verifyThrottled(env, check, () => bootstrapKeyMatches(db, siteId, input.bootstrap_key)))) throw unauthorized(BOOTSTRAP_FAILED);
  const hub = siteHub(env, siteId);
  const { slot } = await hub.takeEnrolmentSlot(perHour);
  let registered;
  try {
    if (await deviceNameTaken(db, siteId, input.device_name)) {
      throw conflict(`A device named '${input.device_name}' already exists in site ${siteId}`);
    }
    registered = await withCreationTime(db, await registerDevice(db, {
      siteId,
      name: input.device_name,
      deviceType: input.device_type,
      osDetails: input.os_details,
      enrollmentMethod: "self-enrolled",
    }, request));
  } catch (error) {
    await hub.giveBackEnrolmentSlot(slot);
    throw error;
  }
  // The device exists from here on: its enrolment slot stays taken whatever happens next.
  await hub.rosterChanged(registered.deviceId);
  return registered;
}

/** Operator-authenticated provisioning (setup wizard): the operator's token vouches for the device. */
export async function provisionDevice(env: Env, db: Db, user: AuthUser, input: { site_id: string; device_name: string; device_type?: string; os_details?: string }, request?: Request) {
  if (!(await findSite(db, input.site_id))) throw notFound(`Site with ID '${input.site_id}' not found`);
  if (await deviceNameTaken(db, input.site_id, input.device_name)) {
    throw conflict(`A device named '${input.device_name}' already exists in site ${input.site_id}`);
  }
  const registered = await withCreationTime(db, await registerDevice(db, {
    siteId: input.site_id, name: input.device_name, deviceType: input.device_type, osDetails: input.os_details,
    enrollmentMethod: "provisioned", createdBy: user.id,
  }, request));
  await deviceListChanged(env, input.site_id, registered.deviceId);
  return registered;
}

/** The registration with the creation time the database gave the device row (answered to the original's agents). */
export async function withCreationTime<T extends { deviceId: string }>(db: Db, registered: T): Promise<T & { createdAt: string }> {
  const row = await db.select({ createdAt: devices.createdAt }).from(devices).where(eq(devices.deviceId, registered.deviceId)).get();
  return { ...registered, createdAt: row?.createdAt ?? currentDate().toISOString() };
}

export async function siteStats(db: Db, siteId: string) {
  const rows = await db.select({ method: devices.enrollmentMethod, n: sql<number>`count(*)` }).from(devices)
    .where(eq(devices.siteId, siteId)).groupBy(devices.enrollmentMethod).all();
  const byMethod: Record<string, number> = { "pre-provisioned": 0, "self-enrolled": 0, provisioned: 0, manual: 0 };
  for (const r of rows) byMethod[r.method] = r.n;
  return { site_id: siteId, total_devices: rows.reduce((sum, r) => sum + r.n, 0), by_enrollment_method: byMethod };
}

export async function currentEpoch(db: Db, deviceId: string) {
  return db.select().from(lifecycleEpochs).where(eq(lifecycleEpochs.deviceId, deviceId)).orderBy(desc(lifecycleEpochs.startedAt)).get();
}

export const ensureOwnDevice = (authenticated: string, claimed: string | undefined) => {
  if (claimed !== undefined && claimed !== authenticated) throw forbidden("device_id does not match X-Device-ID");
};

