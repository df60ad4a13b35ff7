import type { Context } from "hono";
import { getCookie } from "hono/cookie";
import { createMiddleware } from "hono/factory";
import { HTTPException } from "hono/http-exception";
import type { AppEnv } from "../env";
import { ApiError, forbidden, unauthorized } from "../lib/errors";
import { checkAccessToken } from "../services/tokens";
import { findActiveUserById } from "../services/users";
import { DeviceKeyRejected, admitCredential, authenticateDevice, identifyDevice } from "../services/device-auth";
import { recordUnauthorizedAccess } from "../services/security-events";
import { clientAddressOf } from "../services/credential-throttle";
import { recordAudit } from "../services/audit";
import { assertCookieOrigin } from "./cookie-origin";

export const ACCESS_TOKEN_COOKIE = "access_token";

/** The Authorization header wins over the cookie, so a stale browser cookie cannot shadow it. */
export function readAccessToken(authorization: string | undefined, cookie: string | undefined): string | undefined {
  if (authorization) {
    const match = /^Bearer\s+(.+)$/i.exec(authorization.trim());
    return match ? match[1].trim() : undefined;
  }
  return cookie || undefined;
}

/** Methods that change nothing, so a page of another origin gains nothing by sending them with the cookie (CORS keeps the answer from it). */
const READ_ONLY_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/**
 * The user id of the request's access token, verified (no database read); 401 without a valid one.
 * A change authenticated by the cookie must come from a page allowed to use it (403 otherwise): a
 * browser attaches the cookie to a form another page submits, which no CORS preflight stops: with
 * `SameSite=Lax` or `Strict`, to one from a sibling subdomain. A bearer token needs no such check.
 */
export async function verifiedUserId(c: Context<AppEnv>): Promise<number> {
  const authorization = c.req.header("Authorization");
  const token = readAccessToken(authorization, getCookie(c, ACCESS_TOKEN_COOKIE));
  if (!token) throw unauthorized("Not authenticated");
  if (!authorization && !READ_ONLY_METHODS.has(c.req.method)) assertCookieOrigin(c.req.raw, c.var.config.corsOrigins);
  const claims = await checkAccessToken(c.var.config, token);
  if ("refused" in claims) {
    if (claims.refused === "forged") await recordUnauthorizedAccess(c.env.DB, { reason: "forged_token", request: c.req.raw });
    throw unauthorized("Could not validate credentials");
  }
  return claims.userId;
}

/** The 401 of a valid token whose account is gone or deactivated. */
export const accountNotActive = () => unauthorized("Could not validate credentials");

export const requireUser = createMiddleware<AppEnv>(async (c, next) => {
  const user = await findActiveUserById(c.var.db, await verifiedUserId(c));
  if (!user) throw accountNotActive();
  c.set("user", user);
  await next();
});

export const requireAdmin = createMiddleware<AppEnv>(async (c, next) => {
  const user = c.var.user;
  if (!user?.isAdmin) {
    await recordAudit(c.var.db, {
      eventType: "permission_denied",
      description: `Administrator privilege required for ${c.req.method} ${c.req.path}`,
      userId: user?.id,
      metadata: { path: c.req.path, method: c.req.method, required: "admin" },
      request: c.req.raw,
    });
    throw forbidden("Administrator privileges required");
  }
  await next();
});

export const requireDevice = createMiddleware<AppEnv>(async (c, next) => {
  const started = performance.now();
  const { device, usedBcrypt } = await authenticateDevice(
    c.env, c.var.db, c.req.header("X-Device-ID"), c.req.header("X-API-Key"), clientAddressOf(c.req.header("CF-Connecting-IP")))
    .catch(async (error: unknown) => {
      await recordIfKeyRejected(c.env.DB, error, c.req.raw);
      throw error;
    });
  c.set("device", device);
  // Tells operators (and the benchmark) whether the key check hit the verified-key cache.
  c.header("Server-Timing", deviceAuthTiming(usedBcrypt, started));
  await next();
});

/**
 * For routes whose whole work is one call to the device's site hub (heartbeat, telemetry): resolves
 * the credential only, and the handler passes it to a hub method that admits the key before doing
 * anything (`admitThroughHub`), which saves a round trip on the hottest paths. Such a handler has
 * `c.var.deviceCredential` and never `c.var.device`, so it cannot act without that admission.
 *
 * The request's body is validated after this middleware and before the handler, so a body the
 * validators refuse never reached the hub: the key is admitted then, and a wrong key answers the
 * same 401 as an unknown device, whatever the body. Only a caller with the right key learns that its
 * body was wrong.
 */
export const identifyDeviceForHub = createMiddleware<AppEnv>(async (c, next) => {
  const credential = await identifyDevice(
    c.var.db, c.req.header("X-Device-ID"), c.req.header("X-API-Key"), clientAddressOf(c.req.header("CF-Connecting-IP")));
  c.set("deviceCredential", credential);
  await next();
  if (c.error && isRefusedRequest(c.error)) await admitCredential(c.env, credential).catch(async (error: unknown) => {
    await recordIfKeyRejected(c.env.DB, error, c.req.raw);
    throw error;
  });
  if (c.error) await recordIfKeyRejected(c.env.DB, c.error, c.req.raw);
});

async function recordIfKeyRejected(d1: D1Database, error: unknown, request: Request) {
  if (error instanceof DeviceKeyRejected) {
    await recordUnauthorizedAccess(d1, { reason: "device_key_rejected", request, deviceId: error.deviceId, siteId: error.siteId });
  }
}

/** What the validators answer: unreadable (400), unsupported media type (415), invalid (422). */
const isRefusedRequest = (error: Error) =>
  (error instanceof ApiError || error instanceof HTTPException) && [400, 415, 422].includes(error.status);

export const deviceAuthTiming = (usedBcrypt: boolean, started: number) =>
  `device-auth;dur=${(performance.now() - started).toFixed(1)};desc="${usedBcrypt ? "bcrypt" : "cached"}"`;
