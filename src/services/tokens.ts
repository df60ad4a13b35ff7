import { SignJWT, jwtVerify } from "jose";
import type { AppConfig } from "../env";

const ALGORITHM = "HS256";

export async function issueAccessToken(config: AppConfig, user: { id: number; email: string; isAdmin: boolean }) {
  const { secret, issuer, audience, lifetimeMinutes } = config.jwt;
  return new SignJWT({ email: user.email, is_admin: user.isAdmin })
    .setProtectedHeader({ alg: ALGORITHM, typ: "JWT" })
    .setSubject(String(user.id))
    .setIssuer(issuer)
    .setAudience(audience)
    .setIssuedAt()
    .setExpirationTime(`${lifetimeMinutes}m`)
    .sign(secret);
}

/**
 * Verifies signature (HS256 only — `alg: none` and every other algorithm are refused), expiry,
 * issuer and audience. Returns undefined for any invalid token; the caller answers 401.
 */
export async function verifyAccessToken(config: AppConfig, token: string): Promise<{ userId: number } | undefined> {
  try {
    const { payload } = await jwtVerify(token, config.jwt.secret, {
      algorithms: [ALGORITHM],
      issuer: config.jwt.issuer,
      audience: config.jwt.audience,
      requiredClaims: ["exp", "sub"],
    });
    const userId = Number(payload.sub);
    return Number.isSafeInteger(userId) && userId > 0 ? { userId } : undefined;
  } catch {
    return undefined;
  }
}
