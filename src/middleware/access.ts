import type { Context, MiddlewareHandler } from "hono";
import type { z } from "@hono/zod-openapi";
import type { AppEnv, AuthUser, Db, Granted } from "../env";
import type { Role } from "../shared/vocabulary";
import { authorizeSite } from "../services/access";
import { findDevice } from "../services/devices";
import { findJob } from "../services/jobs";
import { findCommandEntry } from "../services/commands";
import { notFound } from "../lib/errors";

/**
 * The role a route needs, on the site of the object its path names. Declared once per route
 * (`apiRoute({ access })`), checked here before the handler runs, so handlers and services never
 * check roles themselves. `from: "query"` reads the site from an optional `?site_id=` filter
 * instead; without it the route lists what the caller can see.
 */
export type AccessRule =
  | { site: Role; from?: "path" | "query" }
  | { device: Role }
  | { job: Role }
  | { command: Role };

type Resolve = (db: Db, user: AuthUser, id: string, minimum: Role, request: Request) => Promise<Granted>;

const RESOLVERS = {
  site: { param: "site_id", resolve: (db, user, id, minimum, request) => authorizeSite(db, user, id, minimum, request) },
  device: {
    param: "device_id",
    resolve: async (db, user, id, minimum, request) => {
      const device = await findDevice(db, id);
      if (!device) throw notFound(`Device with ID '${id}' not found`);
      return { ...(await authorizeSite(db, user, device.siteId, minimum, request)), device };
    },
  },
  job: {
    param: "job_id",
    resolve: async (db, user, id, minimum, request) => {
      const job = await findJob(db, id);
      return { ...(await authorizeSite(db, user, job.siteId, minimum, request)), job };
    },
  },
  command: {
    param: "command_id",
    resolve: async (db, user, id, minimum, request) => {
      const command = await findCommandEntry(db, id);
      return { ...(await authorizeSite(db, user, command.siteId, minimum, request)), command };
    },
  },
} satisfies Record<string, { param: string; resolve: Resolve }>;

type Kind = keyof typeof RESOLVERS;

function ruleParts(rule: AccessRule): { kind: Kind; minimum: Role; fromQuery: boolean } {
  if ("site" in rule) return { kind: "site", minimum: rule.site, fromQuery: rule.from === "query" };
  if ("device" in rule) return { kind: "device", minimum: rule.device, fromQuery: false };
  if ("job" in rule) return { kind: "job", minimum: rule.job, fromQuery: false };
  return { kind: "command", minimum: rule.command, fromQuery: false };
}

/**
 * Runs after authentication and before validation. Input the route's own schema would refuse is
 * left to the validator (a 422), so a malformed id never reaches the database.
 */
export function requireAccess(rule: AccessRule, inputSchema: z.ZodType | undefined): MiddlewareHandler<AppEnv> {
  const { kind, minimum, fromQuery } = ruleParts(rule);
  const { param, resolve } = RESOLVERS[kind];
  return async (c, next) => {
    const input = fromQuery ? c.req.query() : c.req.param();
    if (inputSchema && !inputSchema.safeParse(input).success) return next();
    const id = (input as Record<string, string | undefined>)[param];
    if (id !== undefined) c.set("granted", await resolve(c.var.db, c.var.user!, id, minimum, c.req.raw));
    await next();
  };
}

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
