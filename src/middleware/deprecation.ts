import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../env";
import { editResponseHeaders } from "../lib/response-headers";

const successorLink = (path: string) => `<${path}>; rel="successor-version"`;

/**
 * Wraps everything under an unversioned alias prefix: the answer is the successor's, marked
 * deprecated, and `Link` names the same path under the versioned prefix.
 *
 * Several routers can share one alias prefix (`/sites` carries sites, their devices and their jobs),
 * each wrapped by its own copy of this middleware. Only the routers mounted up to the one whose route
 * answers get to run, so the innermost copy belongs to that router and sets `Link` first; the outer
 * copies keep it, as they do a `Link` set by a route that has moved to another resource (`movedTo`).
 */
export const deprecatedAlias = (alias: string, successorPrefix: string) =>
  createMiddleware<AppEnv>(async (c, next) => {
    await next();
    editResponseHeaders(c, (headers) => {
      headers.set("Deprecation", "true");
      if (!headers.has("Link")) headers.set("Link", successorLink(successorPrefix + c.req.path.slice(alias.length)));
    });
  });

/**
 * One deprecated route whose successor lives elsewhere, e.g. the old agents' command ack under
 * `/devices/{device_id}/commands/...`, answered today by `/api/v1/commands/{command_id}/ack`.
 * `successor` is a path template whose `{name}` parts are filled from the request's path parameters.
 */
export const movedTo = (successor: string) =>
  createMiddleware<AppEnv>(async (c, next) => {
    await next();
    const link = successorLink(successor.replace(/\{(\w+)\}/g, (_m, name: string) => encodeURIComponent(c.req.param(name) ?? "")));
    editResponseHeaders(c, (headers) => {
      headers.set("Deprecation", "true");
      headers.set("Link", link);
    });
  });
