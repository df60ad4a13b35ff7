import { bodyLimit } from "hono/body-limit";
import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../env";
import { ApiError } from "../lib/errors";

const sizeLabel = (bytes: number) => (bytes >= 1024 * 1024 ? `${bytes / (1024 * 1024)} MB` : `${bytes / 1024} KB`);

/** Any request body, up to the configured limit (413 beyond). */
export const requestBodyLimit = createMiddleware<AppEnv>(async (c, next) => {
  const maxSize = c.var.config.limits.requestBodyBytes;
  return bodyLimit({ maxSize, onError: () => { throw new ApiError(413, `Request body too large (limit ${sizeLabel(maxSize)})`); } })(c, next);
});

/** Calls terminals make (heartbeat, telemetry, command results) have a far smaller limit than operators'. */
export const deviceBodyLimit = createMiddleware<AppEnv>(async (c, next) => {
  const maxSize = c.var.config.limits.deviceBodyBytes;
  return bodyLimit({ maxSize, onError: () => { throw new ApiError(413, `Request body too large (limit ${sizeLabel(maxSize)} on device calls)`); } })(c, next);
});
