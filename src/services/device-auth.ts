import { eq } from "drizzle-orm";
import type { AuthDevice, Db, DeviceCredential, Env } from "../env";
import { devices } from "../db/schema";
import { ApiError, forbidden } from "../lib/errors";
import { sameDigest, sha256Hex } from "../shared/ids";
import { siteHub } from "../hub/client";
import { verifySecret } from "./passwords";
import { secondsUntil, throttled, verifyThrottled, type CredentialCheck } from "./credential-throttle";
import { ExpiringMap } from "../lib/expiring-map";
import { UNKNOWN_CLIENT } from "../shared/guard-contract";
import type { Admission, NotAdmitted } from "../shared/hub-contract";
import { workerClock } from "../lib/clock";

/** One body for every credential failure, so a caller learns nothing about which part was wrong. */
export const DEVICE_AUTH_FAILED = "Invalid device credentials";
export const DEVICE_AUTH_THROTTLED = "Too many failed device authentications; try again later";
/** Device responses say whether their key check cost a bcrypt (see deviceAuthTiming). */
const timing = (desc: "bcrypt" | "throttled") => ({ "Server-Timing": `device-auth;desc="${desc}"` });
const deviceUnauthorized = (headers: Record<string, string> = {}) => new ApiError(401, DEVICE_AUTH_FAILED, headers);

/**
 * The 401 of a device key that failed verification against the device's stored hash: the same
 * answer as every other credential failure, but a distinct class so the auth middleware can record
 * it as `unauthorized_access` (an unknown device id or malformed headers are not).
 */
export class DeviceKeyRejected extends ApiError {
  constructor(readonly deviceId: string, readonly siteId: string, headers: Record<string, string>) {
    super(401, DEVICE_AUTH_FAILED, headers);
  }
}

const MAX_REMEMBERED = 50_000;

/**
 * Per isolate: which site a device belongs to. A transfer or purge through another isolate makes an
 * entry stale; the old site's hub then answers `unknown`, which drops the entry (`admitThroughHub`),
 * so the device's next call is looked up afresh.
 */
const deviceSites = new Map<string, string>();

/**
 * Per isolate: device ids D1 did not know a moment ago, so a flood of made-up ids costs no D1 read
 * each. Short-lived, because a device registered by another isolate is unknown here until the entry
 * expires; one registered by this isolate is admitted at once (`deviceCreated`).
 */
export const UNKNOWN_DEVICE_TTL_MS = 30_000;
const unknownDevices = new ExpiringMap<true>(MAX_REMEMBERED);

/**
 * Per isolate: (device, client address) pairs the throttles refused a moment ago, with the moment
 * they may try again. A repeat is refused before its hub call, so a flood of wrong keys costs the
 * Worker next to nothing. Remembered at most a minute, so that a device whose key was replaced
 * through another isolate is not held back here for long.
 */
const REFUSAL_MEMORY_MS = 60_000;
const refusedDevices = new ExpiringMap<number>(MAX_REMEMBERED);
const refusalKey = (deviceId: string, client: string | undefined) => `${deviceId}\n${client ?? UNKNOWN_CLIENT}`;

/**
 * Per isolate: keys this isolate issued (registration, rotation, claim) with the hash it stored, so
 * the device's first call skips a bcrypt whose answer is already known.
 */
const issuedKeys = new Map<string, { keyDigest: string; bcryptHash: string }>();

function remember<V>(map: Map<string, V>, key: string, value: V) {
  map.delete(key);
  if (map.size >= MAX_REMEMBERED) map.delete(map.keys().next().value!);
  map.set(key, value);
}

/** A key that was just hashed at registration, rotation or claim is as good as verified. */
export async function rememberIssuedKey(deviceId: string, apiKey: string, bcryptHash: string) {
  remember(issuedKeys, deviceId, { keyDigest: await sha256Hex(apiKey), bcryptHash });
}

/** A device this isolate just created (registration, provisioning, claim) is known here from now on. */
export function deviceCreated(deviceId: string, siteId: string) {
  unknownDevices.delete(deviceId);
  remember(deviceSites, deviceId, siteId);
}

/** A device this isolate just purged: nothing about it is remembered here any more. */
export function deviceRemoved(deviceId: string) {
  deviceSites.delete(deviceId);
  issuedKeys.delete(deviceId);
}

async function siteOfDevice(db: Db, deviceId: string): Promise<string | undefined> {
  const known = deviceSites.get(deviceId);
  if (known) return known;
  if (unknownDevices.has(deviceId)) return undefined;
  const row = await db.select({ siteId: devices.siteId }).from(devices).where(eq(devices.deviceId, deviceId)).get();
  if (row) remember(deviceSites, deviceId, row.siteId);
  else unknownDevices.set(deviceId, true, workerClock.now() + UNKNOWN_DEVICE_TTL_MS);
  return row?.siteId;
}

const isNotAdmitted = <T>(value: T | NotAdmitted): value is NotAdmitted =>
  typeof value === "object" && value !== null && "notAdmitted" in value;

/**
 * Resolves the headers to a credential; unknown devices and malformed headers are 401 here. `client`
 * is the caller's address (clientAddressOf), which throttles a key that would cost a bcrypt.
 */
export async function identifyDevice(db: Db, deviceId: string | undefined, apiKey: string | undefined, client?: string): Promise<DeviceCredential> {
  if (!deviceId || !apiKey || deviceId.length > 128 || apiKey.length > 256) throw deviceUnauthorized();
  const siteId = await siteOfDevice(db, deviceId);
  if (!siteId) throw deviceUnauthorized();
  return { deviceId, siteId, keyDigest: await sha256Hex(apiKey), apiKey, client };
}

/**
 * X-Device-ID + X-API-Key, checked by the device's site hub (see durable-objects/credentials.ts).
 * `call` is a hub method that admits the key digest before it does anything: in the steady state
 * that one round trip is the whole cost of authentication — no D1 read, no bcrypt. Only a key the
 * hub has not seen pass against the current hash costs a bcrypt here, after which the hub remembers
 * it and the call is made again. That bcrypt is throttled (verifyThrottled): a caller that keeps
 * presenting wrong keys gets 429 without one. Rotation and suspension go through the same hub, so
 * they apply to the very next call from any isolate.
 */
export async function admitThroughHub<T>(
  env: Env,
  credential: DeviceCredential,
  call: (keyDigest: string) => Promise<T | NotAdmitted>,
): Promise<{ value: T; usedBcrypt: boolean }> {
  const { deviceId, siteId, keyDigest, apiKey, client } = credential;
  const throttling: Omit<CredentialCheck, "onRefused"> = {
    kind: "device", id: deviceId, client, refusal: DEVICE_AUTH_THROTTLED, headers: timing("throttled"),
  };
  const refusedUntil = refusedDevices.get(refusalKey(deviceId, client));
  if (refusedUntil !== undefined) throw await throttled(throttling, secondsUntil(refusedUntil));
  const first = await call(keyDigest);
  if (!isNotAdmitted(first)) return { value: first, usedBcrypt: false };
  let admission: Admission = first.notAdmitted;
  let usedBcrypt = false;
  if (admission.result === "verify") {
    const { bcryptHash } = admission;
    const issued = issuedKeys.get(deviceId);
    const known = issued !== undefined && issued.bcryptHash === bcryptHash && sameDigest(issued.keyDigest, keyDigest);
    if (!known) {
      usedBcrypt = true;
      const onRefused = (until: number) => refusedDevices.set(refusalKey(deviceId, client), until, Math.min(until, workerClock.now() + REFUSAL_MEMORY_MS));
      if (!(await verifyThrottled(env, { ...throttling, onRefused }, () => verifySecret(apiKey, bcryptHash)))) throw new DeviceKeyRejected(deviceId, siteId, timing("bcrypt"));
    }
    admission = await siteHub(env, siteId).confirmDeviceKey(deviceId, keyDigest, admission.bcryptHash);
  }
  if (admission.result === "inactive") throw forbidden(`Device is ${admission.state}`);
  if (admission.result !== "ok") {
    // The device may have moved to another site (or been purged) through another isolate.
    deviceSites.delete(deviceId);
    throw deviceUnauthorized();
  }
  const second = await call(credential.keyDigest);
  if (isNotAdmitted(second)) {
    if (second.notAdmitted.result === "inactive") throw forbidden(`Device is ${second.notAdmitted.state}`);
    throw deviceUnauthorized();
  }
  return { value: second, usedBcrypt };
}

/** Authenticates a device call on its own (for routes whose work is not a single hub call). */
export async function authenticateDevice(
  env: Env,
  db: Db,
  deviceId: string | undefined,
  apiKey: string | undefined,
  client?: string,
): Promise<{ device: AuthDevice; usedBcrypt: boolean }> {
  const credential = await identifyDevice(db, deviceId, apiKey, client);
  const { usedBcrypt } = await admitCredential(env, credential);
  return { device: { deviceId: credential.deviceId, siteId: credential.siteId }, usedBcrypt };
}

/** Admits a resolved credential with one hub call of its own (401, 403 or 429 when it is not admitted). */
export function admitCredential(env: Env, credential: DeviceCredential) {
  const hub = siteHub(env, credential.siteId);
  return admitThroughHub(env, credential, async (digest) => {
    const admission = await hub.admitDevice(credential.deviceId, digest);
    return admission.result === "ok" ? admission : { notAdmitted: admission };
  });
}

/** After a key rotation, a lifecycle change or new settings in D1: the hub re-reads the device. */
export async function deviceChanged(env: Env, siteId: string, deviceId: string) {
  issuedKeys.delete(deviceId);
  refusedDevices.deleteWhere((key) => key.startsWith(`${deviceId}\n`));
  await siteHub(env, siteId).deviceChanged(deviceId);
}
