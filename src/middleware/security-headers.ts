import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../env";
import { editResponseHeaders } from "../lib/response-headers";

/**
 * The Content-Security-Policy of everything the Worker answers except the documentation pages: an API
 * response is never a document to render, so it may load nothing, run nothing and be framed nowhere.
 */
export const API_CONTENT_SECURITY_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/**
 * Sent with every answer of the Worker. Static assets (public/) are served before the Worker runs,
 * so public/_headers gives them the same set. docs/security.md ("Headers and CORS") explains each.
 */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  "X-Content-Type-Options": "nosniff",
  "X-Frame-Options": "DENY",
  "Referrer-Policy": "no-referrer",
  "Cross-Origin-Opener-Policy": "same-origin",
  "Cross-Origin-Resource-Policy": "same-origin",
  // Browsers ignore it over plain HTTP (local development), so it is safe to send everywhere.
  "Strict-Transport-Security": "max-age=31536000",
};

/**
 * Adds the security headers to every response, errors included. A route that renders HTML declares
 * its own Content-Security-Policy (the documentation pages do); every other answer gets the API one.
 */
export const securityHeaders = createMiddleware<AppEnv>(async (c, next) => {
  await next();
  editResponseHeaders(c, (headers) => {
    for (const name in SECURITY_HEADERS) headers.set(name, SECURITY_HEADERS[name]);
    if (!headers.has("Content-Security-Policy")) headers.set("Content-Security-Policy", API_CONTENT_SECURITY_POLICY);
  });
});
