import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../env";
import { ApiError } from "../lib/errors";
import { editResponseHeaders } from "../lib/response-headers";
import { readConfig } from "../shared/config";

// What a browser page on a listed origin may send and read. Devices are not browsers: their
// X-Device-ID / X-API-Key headers are deliberately not offered.
const ALLOWED_METHODS = "GET, HEAD, POST, PUT, PATCH, DELETE";
const ALLOWED_REQUEST_HEADERS = "Authorization, Content-Type, Idempotency-Key, Last-Event-ID, X-Request-Id";
const EXPOSED_RESPONSE_HEADERS = "X-Request-Id, X-Total-Count, Retry-After, Deprecation, Link, WWW-Authenticate";
const PREFLIGHT_CACHE_SECONDS = "600";

const isPreflight = (request: Request) =>
  request.method === "OPTIONS" && request.headers.has("Origin") && request.headers.has("Access-Control-Request-Method");

/**
 * Cross-origin access for the origins in CORS_ORIGINS, and for no one else. A listed origin's
 * preflight is answered here (204) and its requests carry Access-Control-Allow-Origin with
 * credentials (the cookie); any other origin gets no CORS header at all, so its browser keeps the
 * answer from the page, and its preflight is refused with 403. Requests without an Origin (devices,
 * scripts, same-origin navigation) are not affected. Runs before the request context, so a preflight
 * costs no database handle and a 503 still reaches the listed page readably.
 */
export const cors = createMiddleware<AppEnv>(async (c, next) => {
  const origin = c.req.header("Origin");
  const listed = origin !== undefined && readConfig(c.env).corsOrigins.includes(origin);

  if (isPreflight(c.req.raw)) {
    c.header("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers");
    if (!listed) throw new ApiError(403, `Cross-origin requests from ${origin} are not allowed`);
    c.header("Access-Control-Allow-Origin", origin);
    c.header("Access-Control-Allow-Credentials", "true");
    c.header("Access-Control-Allow-Methods", ALLOWED_METHODS);
    c.header("Access-Control-Allow-Headers", ALLOWED_REQUEST_HEADERS);
    c.header("Access-Control-Max-Age", PREFLIGHT_CACHE_SECONDS);
    return c.body(null, 204);
  }

  await next();
  // Whether the answer carries CORS headers depends on Origin: a shared cache must not mix origins.
  editResponseHeaders(c, (headers) => {
    headers.append("Vary", "Origin");
    if (!listed) return;
    headers.set("Access-Control-Allow-Origin", origin);
    headers.set("Access-Control-Allow-Credentials", "true");
    headers.set("Access-Control-Expose-Headers", EXPOSED_RESPONSE_HEADERS);
  });
});
