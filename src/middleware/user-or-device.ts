import type { Context } from "hono";
import { getCookie } from "hono/cookie";
import { createMiddleware } from "hono/factory";
import type { AppEnv, AuthUser } from "../env";
import { cookieOriginAllowed } from "./cookie-origin";
import { ACCESS_TOKEN_COOKIE, readAccessToken, requireDevice, requireUser } from "./auth";
import { verifyAccessToken } from "../services/tokens";
import { findActiveUserById } from "../services/users";

/**
 * For reports an operator or the device itself may send (a device's state change, a job outcome):
 * a request that presents device headers is authenticated as that device, anything else as a user.
 * What each may report is the route's own check (src/routes/analytics/routes.ts).
 */
export const requireUserOrDevice = createMiddleware<AppEnv>(async (c, next) => {
  const presentsDevice = c.req.header("X-Device-ID") !== undefined || c.req.header("X-API-Key") !== undefined;
  return presentsDevice ? requireDevice(c, next) : requireUser(c, next);
});

/**
 * The signed-in user of a request that does not require one (a browser reporting its own crash
 * before or after sign-in): undefined when there is no token, or it does not verify. The cookie of
 * a request another site's page started is ignored rather than refused: the report is kept, but
 * nobody else's page can put a report under the user's name.
 */
export async function userIfSignedIn(c: Context<AppEnv>): Promise<AuthUser | undefined> {
  const authorization = c.req.header("Authorization");
  const cookie = getCookie(c, ACCESS_TOKEN_COOKIE);
  const cookieUsable = cookie !== undefined && cookieOriginAllowed(c.req.raw, c.var.config.corsOrigins);
  const token = readAccessToken(authorization, cookieUsable ? cookie : undefined);
  if (!token) return undefined;
  const claims = await verifyAccessToken(c.var.config, token);
  return claims ? findActiveUserById(c.var.db, claims.userId) : undefined;
}
