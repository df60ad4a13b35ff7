import { createMiddleware } from "hono/factory";
import { drizzle } from "drizzle-orm/d1";
import * as schema from "../db/schema";
import type { AppEnv, Db } from "../env";
import { readConfig } from "../shared/config";
import { ApiError } from "../lib/errors";
import { editResponseHeaders } from "../lib/response-headers";

// Building a Drizzle client walks the whole schema; one per D1 binding is enough.
const clients = new WeakMap<D1Database, Db>();
function database(binding: D1Database): Db {
  let db = clients.get(binding);
  if (!db) clients.set(binding, (db = drizzle(binding, { schema })));
  return db;
}

/** Request id, configuration and the database handle, available to everything after it as `c.var`. */
export const requestContext = createMiddleware<AppEnv>(async (c, next) => {
  const incoming = c.req.header("X-Request-Id");
  const requestId = incoming && /^[\w.:-]{1,128}$/.test(incoming) ? incoming : crypto.randomUUID();
  c.set("requestId", requestId);
  c.header("X-Request-Id", requestId);
  c.set("db", database(c.env.DB));
  const config = readConfig(c.env);
  // A Worker has no start-up step that could refuse to boot, so a bad secret refuses every request.
  if (!config.jwt) throw new ApiError(503, "Service misconfigured: JWT_SECRET must be at least 32 bytes");
  c.set("config", { ...config, jwt: config.jwt });
  await next();
  editResponseHeaders(c, (headers) => headers.set("X-Request-Id", requestId));
});
