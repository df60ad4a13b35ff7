import { eq } from "drizzle-orm";
import type { AuthDevice, Db, Env } from "../env";
import { devices } from "../db/schema";
import { ApiError, forbidden } from "../lib/errors";
import { verifySecret } from "./passwords";

/** One body for every credential failure, so a caller learns nothing about which part was wrong. */
export const DEVICE_AUTH_FAILED = "Invalid device credentials";
const deviceUnauthorized = () => new ApiError(401, DEVICE_AUTH_FAILED);

const VERIFIED_TTL_MS = 60_000;
const MAX_CACHED = 50_000;

interface VerifiedKey {
  bcryptHash: string;
  keyDigest: Uint8Array;
  verifiedAt: number;
}

/**
 * Per-isolate memory of keys that passed bcrypt: SHA-256 of the key, tied to the bcrypt hash it
 * matched. Rotation changes the stored hash, so a rotated key misses at once; suspension is read
 * from the device row on every call.
 */
const verified = new Map<string, VerifiedKey>();

async function digest(key: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(key)));
}

function sameDigest(a: Uint8Array, b: Uint8Array): boolean {
  return a.byteLength === b.byteLength && crypto.subtle.timingSafeEqual(a, b);
}

let bcryptVerifications = 0;
/** How many bcrypt checks this isolate has run (reported by the benchmark). */
export const bcryptVerificationCount = () => bcryptVerifications;

export function forgetVerifiedKey(deviceId: string) {
  verified.delete(deviceId);
}

export async function authenticateDevice(
  _env: Env,
  db: Db,
  deviceId: string | undefined,
  apiKey: string | undefined,
  now = Date.now(),
): Promise<AuthDevice> {
  if (!deviceId || !apiKey || deviceId.length > 128 || apiKey.length > 256) throw deviceUnauthorized();
  const row = await db
    .select({ deviceId: devices.deviceId, siteId: devices.siteId, apiKeyHash: devices.apiKeyHash, lifecycleState: devices.lifecycleState })
    .from(devices).where(eq(devices.deviceId, deviceId)).get();
  if (!row?.apiKeyHash) throw deviceUnauthorized();

  const keyDigest = await digest(apiKey);
  const cached = verified.get(deviceId);
  const fresh = cached && cached.bcryptHash === row.apiKeyHash && now - cached.verifiedAt < VERIFIED_TTL_MS;
  if (!(fresh && sameDigest(cached.keyDigest, keyDigest))) {
    bcryptVerifications++;
    if (!(await verifySecret(apiKey, row.apiKeyHash))) throw deviceUnauthorized();
    if (verified.size >= MAX_CACHED) verified.delete(verified.keys().next().value!);
    verified.set(deviceId, { bcryptHash: row.apiKeyHash, keyDigest, verifiedAt: now });
  }
  if (row.lifecycleState !== "active") throw forbidden(`Device is ${row.lifecycleState}`);
  return { deviceId: row.deviceId, siteId: row.siteId };
}
