import type { Context, MiddlewareHandler } from "hono";
import type { z } from "@hono/zod-openapi";
import type { AppEnv, AuthUser, Db, Granted } from "../env";
import type { Role } from "../shared/vocabulary";
import { authorizeSite, checkSiteAccess, deviceNotFound, findUserAndSiteAccess, type SiteAccessOptions } from "../services/access";
import { findActiveUserById } from "../services/users";
import { findUserAndSiteAccessForRead } from "../services/site-access-cache";
import { accountNotActive, verifiedUserId } from "./auth";
import { findDevice } from "../services/devices";
import { findJob, jobNotFound } from "../services/jobs";
import { commandNotFound, findCommandEntry } from "../services/commands";

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

type Resolve = (db: Db, user: AuthUser, id: string, minimum: Role, request: Request, options: SiteAccessOptions) => Promise<Granted>;

const RESOLVERS = {
  site: { param: "site_id", resolve: (db, user, id, minimum, request, options) => authorizeSite(db, user, id, minimum, request, options) },
  device: {
    param: "device_id",
    resolve: async (db, user, id, minimum, request) => {
      const device = await findDevice(db, id);
      if (!device) throw deviceNotFound(id);
      return { ...(await authorizeSite(db, user, device.siteId, minimum, request, { hiddenAs: () => deviceNotFound(id) })), device };
    },
  },
  job: {
    param: "job_id",
    resolve: async (db, user, id, minimum, request) => {
      const job = await findJob(db, id);
      return { ...(await authorizeSite(db, user, job.siteId, minimum, request, { hiddenAs: () => jobNotFound(id) })), job };
    },
  },
  command: {
    param: "command_id",
    resolve: async (db, user, id, minimum, request) => {
      const command = await findCommandEntry(db, id);
      return { ...(await authorizeSite(db, user, command.siteId, minimum, request, { hiddenAs: commandNotFound })), command };
    },
  },
} satisfies Record<string, { param: string; resolve: Resolve }>;

type Kind = keyof typeof RESOLVERS;

function ruleParts(rule: AccessRule): { kind: Kind; minimum: Role; fromQuery: boolean; options?: SiteAccessOptions } {
  if ("site" in rule) return { kind: "site", minimum: rule.site, fromQuery: rule.from === "query", options: { outsider: rule.outsider } };
  if ("device" in rule) return { kind: "device", minimum: rule.device, fromQuery: false };
  if ("job" in rule) return { kind: "job", minimum: rule.job, fromQuery: false };
  return { kind: "command", minimum: rule.command, fromQuery: false };
}

/**
 * Runs after authentication and before validation. Input the route's own schema would refuse is
 * left to the validator (a 422), so a malformed id never reaches the database.
 */
export function requireAccess(rule: AccessRule, inputSchema: z.ZodType | undefined): MiddlewareHandler<AppEnv> {
  const { kind, minimum, fromQuery, options = {} } = ruleParts(rule);
  const { param, resolve } = RESOLVERS[kind];
  return async (c, next) => {
    const input = fromQuery ? c.req.query() : c.req.param();
    if (inputSchema && !inputSchema.safeParse(input).success) return next();
    const id = (input as Record<string, string | undefined>)[param];
    if (id !== undefined) c.set("granted", await resolve(c.var.db, c.var.user!, id, minimum, c.req.raw, options));
    await next();
  };
}

/**
 * Authentication and a site rule read from the path, in one D1 statement: the signed-in user, the
 * site and the user's role on it come back together (findUserAndSiteAccess). It answers exactly as
 * requireUser followed by requireAccess would, in the same order: no or a bad token 401, input the
 * route's schema refuses left to the validator, an account gone or deactivated 401, then the site
 * rule's 404 and 403.
 *
 * A read (GET or HEAD) may take that answer from this isolate's short-lived cache
 * (services/site-access-cache.ts); every other method reads D1.
 */
export function requireUserWithSiteAccess(rule: { site: Role; outsider?: SiteAccessOptions["outsider"] }, paramsSchema: z.ZodType | undefined): MiddlewareHandler<AppEnv> {
  const options: SiteAccessOptions = { outsider: rule.outsider };
  return async (c, next) => {
    const userId = await verifiedUserId(c);
    const params = c.req.param();
    const siteId = (params as Record<string, string | undefined>).site_id;
    if (siteId === undefined || (paramsSchema && !paramsSchema.safeParse(params).success)) {
      const user = await findActiveUserById(c.var.db, userId);
      if (!user) throw accountNotActive();
      c.set("user", user);
      return next();
    }
    const lookUp = isSafeMethod(c.req.method) ? findUserAndSiteAccessForRead : findUserAndSiteAccess;
    const { user, access } = await lookUp(c.var.db, userId, siteId);
    if (!user) throw accountNotActive();
    c.set("user", user);
    c.set("granted", await checkSiteAccess(c.var.db, user, siteId, access, rule.site, c.req.raw, options));
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
