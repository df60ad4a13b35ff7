import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../env";

/** Unversioned compatibility paths answer like their /api/v1 successors but say they are deprecated. */
export const deprecatedPath = (successor: (path: string) => string) =>
  createMiddleware<AppEnv>(async (c, next) => {
    await next();
    c.header("Deprecation", "true");
    c.header("Link", `<${successor(c.req.path)}>; rel="successor-version"`);
  });
