import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import type { AppEnv } from "../env";
import { ApiError } from "../lib/errors";
import { recordError } from "../services/analytics-errors";
import { workerClock } from "../lib/clock";

/** Maps everything thrown to the one error shape; unexpected failures become a logged 500. */
export function handleError(error: Error, c: Context<AppEnv>) {
  if (error instanceof ApiError) {
    for (const [name, value] of Object.entries(error.headers)) c.header(name, value);
    return c.json({ ...error.extra, detail: error.detail }, error.status);
  }
  if (error instanceof HTTPException) {
    // Hono's own rejections (malformed JSON, body too large) keep their status.
    const detail = error.status === 400 ? "Malformed JSON in request body" : error.message || "Request rejected";
    return c.json({ detail }, error.status);
  }
  console.error("unhandled error", c.var.requestId, error);
  // Recorded like any reported error (category api), so a failure repeating on every request is
  // one row with an occurrence count.
  if (c.env?.DB) {
    const write = recordError(c.env.DB, {
      category: "api",
      severity: "error",
      message: String(error?.message ?? error).slice(0, 2000),
      stackTrace: error?.stack?.slice(0, 8000) ?? null,
      context: { method: c.req.method, path: c.req.path },
      requestId: c.var.requestId ?? null,
      userId: c.var.user?.id ?? null,
    }, workerClock.now()).catch((writeError) => console.error("error log write failed", writeError));
    try {
      c.executionCtx.waitUntil(write);
    } catch {
      // No execution context (direct app.request in a unit test): the write still runs.
    }
  }
  return c.json({ detail: "Internal server error" }, 500);
}

export const notFoundHandler = (c: Context<AppEnv>) => c.json({ detail: "Not Found" }, 404);
