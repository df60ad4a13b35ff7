import { SignJWT, jwtVerify } from "jose";
import type { AppConfig } from "../env";
import { currentDate, workerClock } from "../lib/clock";

const ALGORITHM = "HS256";

/**
 * The verification key, imported once per secret and isolate: handed the raw bytes, jose imports
 * them into WebCrypto on every verification, the most frequent work of every signed-in request.
 * Kept as the key itself, never the import in flight, which another request could not await.
 */
const verificationKeys = new WeakMap<Uint8Array, CryptoKey>();

async function verificationKey(secret: Uint8Array): Promise<CryptoKey> {
  let key = verificationKeys.get(secret);
  if (!key) {
    key = await crypto.subtle.importKey("raw", secret, { name: "HMAC", hash: "SHA-256" }, false, ["verify"]);
    verificationKeys.set(secret, key);
  }
  return key;
}

export async function issueAccessToken(config: AppConfig, user: { id: number; email: string; isAdmin: boolean }) {
  const { secret, issuer, audience, lifetimeMinutes } = config.jwt;
  const issuedAt = Math.floor(workerClock.now() / 1000);
  return new SignJWT({ email: user.email, is_admin: user.isAdmin })
    .setProtectedHeader({ alg: ALGORITHM, typ: "JWT" })
    .setSubject(String(user.id))
    .setIssuer(issuer)
    .setAudience(audience)
    .setIssuedAt(issuedAt)
    .setExpirationTime(issuedAt + lifetimeMinutes * 60)
    .sign(secret);
}

/** How far ahead of this isolate's clock a token's `iat` may be: the isolate that issued it may run a little ahead. */
export const ISSUED_AT_SKEW_S = 60;

type TimeClaims = { iat?: number; exp?: number };

/**
 * Why a token's times are not acceptable, or undefined when they are. A token lives at most the
 * configured lifetime from `iat`, whatever its `exp` says, and may not claim a longer life than that
 * (so a token signed to expire in ten years is refused); `iat` may not lie in the future beyond a
 * small clock skew.
 */
export function tokenTimeProblem(claims: TimeClaims, nowS: number, lifetimeS: number): string | undefined {
  const { iat, exp } = claims;
  if (typeof iat !== "number" || !Number.isFinite(iat)) return "no iat";
  if (typeof exp !== "number" || !Number.isFinite(exp)) return "no exp";
  if (iat > nowS + ISSUED_AT_SKEW_S) return "issued in the future";
  if (nowS - iat > lifetimeS) return "older than the token lifetime";
  if (exp - iat > lifetimeS) return "claims a longer life than the token lifetime";
  return undefined;
}

/**
 * Why a presented token was refused: `forged` when it is not one this service signed (a bad
 * signature, a refused algorithm such as `none`, or not a JWS at all), `invalid` when it is ours but
 * no longer acceptable (expired, wrong issuer or audience, too old). Only a forged token is a
 * security event; an expired one is ordinary.
 */
export type TokenRefusal = "forged" | "invalid";

const FORGERY_CODES = new Set(["ERR_JWS_SIGNATURE_VERIFICATION_FAILED", "ERR_JOSE_ALG_NOT_ALLOWED", "ERR_JWS_INVALID", "ERR_JWT_INVALID", "ERR_JOSE_NOT_SUPPORTED"]);

/**
 * Verifies signature (HS256 only — `alg: none` and every other algorithm are refused), expiry,
 * issuer, audience and the token's age (tokenTimeProblem), and says why a token is refused.
 */
export async function checkAccessToken(config: AppConfig, token: string): Promise<{ userId: number } | { refused: TokenRefusal }> {
  try {
    const { payload } = await jwtVerify(token, await verificationKey(config.jwt.secret), {
      algorithms: [ALGORITHM],
      issuer: config.jwt.issuer,
      audience: config.jwt.audience,
      requiredClaims: ["exp", "iat", "sub"],
      currentDate: currentDate(),
    });
    if (tokenTimeProblem(payload, Math.floor(workerClock.now() / 1000), config.jwt.lifetimeMinutes * 60)) return { refused: "invalid" };
    const userId = Number(payload.sub);
    return Number.isSafeInteger(userId) && userId > 0 ? { userId } : { refused: "invalid" };
  } catch (error) {
    const code = typeof error === "object" && error !== null && "code" in error ? String(error.code) : "";
    return { refused: FORGERY_CODES.has(code) ? "forged" : "invalid" };
  }
}

/** checkAccessToken without the reason: undefined for any refused token; the caller answers 401. */
export async function verifyAccessToken(config: AppConfig, token: string): Promise<{ userId: number } | undefined> {
  const checked = await checkAccessToken(config, token);
  return "userId" in checked ? checked : undefined;
}
