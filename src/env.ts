import type { DrizzleD1Database } from "drizzle-orm/d1";
import type * as schema from "./db/schema";
import type { Config } from "./config";
import type { SiteHub } from "../durable-objects/site-hub";

/** Bindings and variables from wrangler.toml, `.dev.vars` and secrets. */
export interface Env {
  DB: D1Database;
  SITE_HUB: DurableObjectNamespace<SiteHub>;
  ASSETS?: Fetcher;
  REQUEST_LOG_AE?: AnalyticsEngineDataset;
  JWT_SECRET?: string;
  ENVIRONMENT?: string;
  JWT_ISSUER?: string;
  JWT_AUDIENCE?: string;
  ACCESS_TOKEN_MINUTES?: string;
  COOKIE_SAMESITE?: string;
  COOKIE_SECURE?: string;
  REQUEST_LOG_ENABLED?: string;
  METRICS_SNAPSHOT_INTERVAL_S?: string;
  METRICS_CHANGE_THRESHOLD_PERCENT?: string;
  OIDC_ISSUER?: string;
  OIDC_CLIENT_ID?: string;
  OIDC_CLIENT_SECRET?: string;
  OIDC_REDIRECT_URI?: string;
  FRONTEND_URL?: string;
}

export type Db = DrizzleD1Database<typeof schema>;

export interface AuthUser {
  id: number;
  email: string;
  username: string;
  fullName: string | null;
  isAdmin: boolean;
}

export interface AuthDevice {
  deviceId: string;
  siteId: string;
}

export interface AppVariables {
  requestId: string;
  config: Config;
  db: Db;
  user?: AuthUser;
  device?: AuthDevice;
  deviceCredential?: import("./services/device-auth").DeviceCredential;
}

export type AppEnv = { Bindings: Env; Variables: AppVariables };
