import { eq } from "drizzle-orm";
import type { AuthDevice, Db, Env } from "../env";
import { devices } from "../db/schema";
import { ApiError, forbidden } from "../lib/errors";
import { sameDigest, sha256Hex } from "../lib/ids";
import { siteHub } from "./live";
import { verifySecret } from "./passwords";

/** One body for every credential failure, so a caller learns nothing about which part was wrong. */
export const DEVICE_AUTH_FAILED = "Invalid device credentials";
const deviceUnauthorized = () => new ApiError(401, DEVICE_AUTH_FAILED);

const MAX_REMEMBERED = 50_000;

/** Per isolate: which site a device belongs to. A device never changes site, so this never goes stale. */
const deviceSites = new Map<string, string>();

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

async function siteOfDevice(db: Db, deviceId: string): Promise<string | undefined> {
  const known = deviceSites.get(deviceId);
  if (known) return known;
  const row = await db.select({ siteId: devices.siteId }).from(devices).where(eq(devices.deviceId, deviceId)).get();
  if (row) remember(deviceSites, deviceId, row.siteId);
  return row?.siteId;
}

export interface DeviceAuthResult {
  device: AuthDevice;
  /** Whether this call paid for a bcrypt check (reported in Server-Timing). */
  usedBcrypt: boolean;
}

/**
 * X-Device-ID + X-API-Key. The device's site hub holds its credential (see
 * durable-objects/credentials.ts) and admits the call by the key's SHA-256; only a key it has not
 * seen pass against the current hash costs a bcrypt here, after which the hub remembers it. So a
 * steady device call reads nothing from D1 and runs no bcrypt, while a rotation or suspension —
 * which goes through the same hub — applies to the very next call from any isolate.
 */
export async function authenticateDevice(
  env: Env,
  db: Db,
  deviceId: string | undefined,
  apiKey: string | undefined,
): Promise<DeviceAuthResult> {
  if (!deviceId || !apiKey || deviceId.length > 128 || apiKey.length > 256) throw deviceUnauthorized();
  const siteId = await siteOfDevice(db, deviceId);
  if (!siteId) throw deviceUnauthorized();
  const digest = await sha256Hex(apiKey);
  const hub = siteHub(env, siteId);
  let admission = await hub.admitDevice(siteId, deviceId, digest);
  let usedBcrypt = false;
  if (admission.result === "verify") {
    const issued = issuedKeys.get(deviceId);
    const known = issued !== undefined && issued.bcryptHash === admission.bcryptHash && sameDigest(issued.keyDigest, digest);
    if (!known) {
      usedBcrypt = true;
      if (!(await verifySecret(apiKey, admission.bcryptHash))) throw deviceUnauthorized();
    }
    admission = await hub.confirmDeviceKey(siteId, deviceId, digest, admission.bcryptHash);
  }
  if (admission.result === "inactive") throw forbidden(`Device is ${admission.state}`);
  if (admission.result !== "ok") throw deviceUnauthorized();
  return { device: { deviceId, siteId }, usedBcrypt };
}

/** After a key rotation or a lifecycle change in D1: the hub re-reads the device's credential. */
export async function invalidateDeviceCredential(env: Env, siteId: string, deviceId: string) {
  issuedKeys.delete(deviceId);
  await siteHub(env, siteId).invalidateDeviceCredential(siteId, deviceId);
}
