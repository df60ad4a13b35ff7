import type { Context, MiddlewareHandler } from "hono";
import type { z } from "@hono/zod-openapi";
import type { AppEnv, AuthUser, Db, Granted } from "../env";
import type { Role } from "../shared/vocabulary";
import type { ApiError } from "../lib/errors";
import {
  checkSiteAccess, deviceNotFound, findUserAndObjectAccess, findUserAndSiteAccess, siteNotFound, type SiteAccess, type SiteAccessOptions, type SiteScopedKind,
} from "../services/access";
import { findActiveUserById } from "../services/users";
import { findUserAndSiteAccessForRead } from "../services/site-access-cache";
import { accountNotActive, verifiedUserId } from "./auth";
import { jobNotFound } from "../services/jobs";
import { commandNotFound } from "../services/commands";

/**
 * The role a route needs, on the site of the object its path names. Declared once per route
 * (`apiRoute({ access })`), checked here before the handler runs, so handlers and services never
 * check roles themselves. `from: "query"` reads the site from an optional `?site_id=` filter
 * instead; without it the route lists what the caller can see.
 *
 * A caller with no role on the site is told the object does not exist (the 404 of an unknown id);
 * one whose role is too low is told 403 (docs/security.md, "Existence and access").
 * `outsider: "forbidden"` answers 403 to the first as well, for the enrolment-intent calls whose
 * contract names it.
 */
export type AccessRule =
  | { site: Role; from?: "path" | "query"; outsider?: SiteAccessOptions["outsider"] }
  | { device: Role }
  | { job: Role }
  | { command: Role };

/** What one lookup found: the account (when active), the named object (for a device, job or command), and its site with the caller's role there. */
interface Found {
  user?: AuthUser;
  access?: SiteAccess;
  object?: Pick<Granted, "device" | "job" | "command"> & { siteId: string };
}

/**
 * Each kind of rule: the path (or query) parameter naming the object, the one-statement lookup of
 * the user together with the object and the user's role on its site, and the 404 of an unknown id.
 * `forRead`: the request changes nothing, so a site's answer may come from the isolate's cache.
 */
const KINDS: Record<Kind, { param: string; lookUp: (db: Db, userId: number, id: string, forRead: boolean) => Promise<Found>; notFound: (id: string) => ApiError }> = {
  site: {
    param: "site_id",
    lookUp: (db, userId, id, forRead) => (forRead ? findUserAndSiteAccessForRead : findUserAndSiteAccess)(db, userId, id),
    notFound: siteNotFound,
  },
  device: { param: "device_id", lookUp: objectLookUp("device"), notFound: deviceNotFound },
  job: { param: "job_id", lookUp: objectLookUp("job"), notFound: jobNotFound },
  command: { param: "command_id", lookUp: objectLookUp("command"), notFound: () => commandNotFound() },
};

/** The lookup of a device, job or command: the row comes back under its own name, as `Granted` carries it. */
function objectLookUp(kind: SiteScopedKind) {
  return async (db: Db, userId: number, id: string): Promise<Found> => {
    const { object, ...found } = await findUserAndObjectAccess(db, userId, kind, id);
    return { ...found, object: object && { [kind]: object, siteId: object.siteId } };
  };
}

type Kind = "site" | SiteScopedKind;

function ruleParts(rule: AccessRule): { kind: Kind; minimum: Role; fromQuery: boolean; options?: SiteAccessOptions } {
  if ("site" in rule) return { kind: "site", minimum: rule.site, fromQuery: rule.from === "query", options: { outsider: rule.outsider } };
  if ("device" in rule) return { kind: "device", minimum: rule.device, fromQuery: false };
  if ("job" in rule) return { kind: "job", minimum: rule.job, fromQuery: false };
  return { kind: "command", minimum: rule.command, fromQuery: false };
}

/** The rule applied to what the lookup found: an unknown object 404; no role on its site the same 404; a role too low 403. */
async function grant(db: Db, user: AuthUser, kind: Kind, id: string, found: Found, minimum: Role, request: Request, options: SiteAccessOptions): Promise<Granted> {
  const hiddenAs = () => KINDS[kind].notFound(id);
  if (kind !== "site" && !found.object) throw hiddenAs();
  const { siteId, ...object } = found.object ?? { siteId: id };
  return { ...(await checkSiteAccess(db, user, siteId, found.access, minimum, request, { ...options, hiddenAs })), ...object };
}

/**
 * The access check of a route whose user another middleware authenticated (a site named by the
 * query, or a route with its own authentication). Runs after authentication and before validation.
 * Input the route's own schema would refuse is left to the validator (a 422), so a malformed id
 * never reaches the database.
 */
export function requireAccess(rule: AccessRule, inputSchema: z.ZodType | undefined): MiddlewareHandler<AppEnv> {
  const { kind, minimum, fromQuery, options = {} } = ruleParts(rule);
  const { param, lookUp } = KINDS[kind];
  return async (c, next) => {
    const input = fromQuery ? c.req.query() : c.req.param();
    if (inputSchema && !inputSchema.safeParse(input).success) return next();
    const id = (input as Record<string, string | undefined>)[param];
    if (id !== undefined) {
      const user = c.var.user!;
      c.set("granted", await grant(c.var.db, user, kind, id, await lookUp(c.var.db, user.id, id, false), minimum, c.req.raw, options));
    }
    await next();
  };
}

/**
 * Authentication and an access rule read from the path, in one D1 statement: the signed-in user,
 * the object the path names, its site and the user's role there come back together
 * (findUserAndSiteAccess, findUserAndObjectAccess). It answers exactly as requireUser followed by
 * requireAccess would, in the same order: no or a bad token 401, input the route's schema refuses
 * left to the validator, an account gone or deactivated 401, then the rule's 404 and 403.
 *
 * A read (GET or HEAD) of a site route may take that answer from this isolate's short-lived cache
 * (services/site-access-cache.ts); every other request reads D1.
 */
export function requireUserWithAccess(rule: AccessRule, paramsSchema: z.ZodType | undefined): MiddlewareHandler<AppEnv> {
  const { kind, minimum, options = {} } = ruleParts(rule);
  const { param, lookUp } = KINDS[kind];
  return async (c, next) => {
    const userId = await verifiedUserId(c);
    const params = c.req.param();
    const id = (params as Record<string, string | undefined>)[param];
    if (id === undefined || (paramsSchema && !paramsSchema.safeParse(params).success)) {
      const user = await findActiveUserById(c.var.db, userId);
      if (!user) throw accountNotActive();
      c.set("user", user);
      return next();
    }
    const found = await lookUp(c.var.db, userId, id, isSafeMethod(c.req.method));
    if (!found.user) throw accountNotActive();
    c.set("user", found.user);
    c.set("granted", await grant(c.var.db, found.user, kind, id, found, minimum, c.req.raw, options));
    await next();
  };
}

const isSafeMethod = (method: string) => method === "GET" || method === "HEAD";

function granted(c: Context<AppEnv>): Granted {
  const found = c.var.granted;
  if (!found) throw new Error(`${c.req.method} ${c.req.path}: the route declares no access rule`);
  return found;
}

/** The checked site (and role) of a route declared with `access: { site }`. */
export const grantedSite = (c: Context<AppEnv>) => granted(c);

/** The checked device of a route declared with `access: { device }`. */
export function grantedDevice(c: Context<AppEnv>): Granted & { device: NonNullable<Granted["device"]> } {
  const found = granted(c);
  if (!found.device) throw new Error(`${c.req.method} ${c.req.path}: the route's access rule names no device`);
  return { ...found, device: found.device };
}

/** The checked job of a route declared with `access: { job }`. */
export function grantedJob(c: Context<AppEnv>): NonNullable<Granted["job"]> {
  const found = granted(c);
  if (!found.job) throw new Error(`${c.req.method} ${c.req.path}: the route's access rule names no job`);
  return found.job;
}

/** The checked command (where it lives) of a route declared with `access: { command }`. */
export function grantedCommand(c: Context<AppEnv>): NonNullable<Granted["command"]> {
  const found = granted(c);
  if (!found.command) throw new Error(`${c.req.method} ${c.req.path}: the route's access rule names no command`);
  return found.command;
}

/** The site a `from: "query"` rule checked, when the request named one. */
export const grantedSiteIfNamed = (c: Context<AppEnv>) => c.var.granted;
