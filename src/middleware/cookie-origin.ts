import { forbidden } from "../lib/errors";

/**
 * Whether a request authenticated by the session cookie comes from a page allowed to use it: the
 * service's own origin or one listed in CORS_ORIGINS. Browsers attach the cookie to requests other
 * sites start, and a WebSocket handshake is not subject to CORS at all, so without this check any
 * page the user visits could open a live subscription as them.
 *
 * Without an Origin header: browsers send one on every WebSocket handshake and every cross-origin
 * request, so its absence means a same-origin EventSource or a client that is not a browser (which
 * could send any Origin it liked anyway). That is allowed, unless the browser's own
 * `Sec-Fetch-Site` says another site started the request (a no-cors request such as an image).
 */
export function cookieOriginAllowed(request: Request, allowedOrigins: readonly string[]): boolean {
  const origin = request.headers.get("Origin");
  if (origin === null) {
    const site = request.headers.get("Sec-Fetch-Site");
    return site === null || site === "same-origin" || site === "none";
  }
  return origin === new URL(request.url).origin || allowedOrigins.includes(origin);
}

/** Refuses (403) a cookie-authenticated request from an origin that may not use the cookie. */
export function assertCookieOrigin(request: Request, allowedOrigins: readonly string[]) {
  if (!cookieOriginAllowed(request, allowedOrigins)) {
    throw forbidden("Cookie authentication is not accepted from this origin; use a one-use ticket or a bearer token");
  }
}
