import { bodyLimit } from "hono/body-limit";
import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../env";
import { ApiError } from "../lib/errors";

export const ANALYTICS_DISABLED_DETAIL = "Analytics collection is switched off on this service (ANALYTICS_ENABLED); nothing was recorded";

/**
 * In front of every analytics report: with ANALYTICS_ENABLED off it answers 503 before anything
 * else (authentication included), so nothing is read or written; otherwise it limits the body to
 * the analytics size (413 beyond), far below the 1 MB of operators' calls.
 */
export const analyticsCollection = createMiddleware<AppEnv>(async (c, next) => {
  if (!c.var.config.analyticsEnabled) throw new ApiError(503, ANALYTICS_DISABLED_DETAIL);
  const maxSize = c.var.config.limits.analyticsBodyBytes;
  return bodyLimit({
    maxSize,
    onError: () => { throw new ApiError(413, `Request body too large (limit ${maxSize / 1024} KB on analytics reports)`); },
  })(c, next);
});
