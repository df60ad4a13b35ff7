/**
 * The service's configuration: every variable it reads, parsed in one place for the Worker and the
 * site hubs alike. Variables come from `[vars]` in wrangler.toml, `.dev.vars` locally and secrets
 * when deployed; the README's Configuration table documents each one.
 */

/** Every variable the service reads (all optional strings, as bindings deliver them). */
export interface Vars {
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
  METRICS_ERROR_RATE_DELTA?: string;
  METRICS_RETENTION_DAYS?: string;
  AGENT_FAILURE_RATE?: string;
  OIDC_ISSUER?: string;
  OIDC_CLIENT_ID?: string;
  OIDC_CLIENT_SECRET?: string;
  OIDC_REDIRECT_URI?: string;
  FRONTEND_URL?: string;
  CORS_ORIGINS?: string;
}

/** What a site hub is given: the database and the variables (the Worker's Env adds its own bindings). */
export interface HubBindings extends Vars {
  DB: D1Database;
}

/** When a telemetry sample is worth storing (see durable-objects/metrics.ts). */
export interface MetricsPolicy {
  snapshotIntervalMs: number;
  /** Relative change, e.g. 0.05 for 5 %. */
  changeThreshold: number;
  /** Absolute change used when the stored value is 0. */
  zeroBaselineDelta: number;
  errorRateDelta: number;
  retentionDays: number;
}

export interface Config {
  environment: string;
  isProduction: boolean;
  /** Undefined when JWT_SECRET is missing or shorter than 32 bytes: the Worker then answers 503. */
  jwt: { secret: Uint8Array; issuer: string; audience: string; lifetimeMinutes: number } | undefined;
  cookie: { sameSite: "Strict" | "Lax" | "None"; secure: boolean };
  requestLogEnabled: boolean;
  limits: {
    /** Any request body. */
    requestBodyBytes: number;
    /** Calls terminals make (heartbeat, telemetry, command results): far smaller than operators'. */
    deviceBodyBytes: number;
  };
  retention: {
    /** Request log and user activity rows. */
    analyticsDays: number;
  };
  metrics: MetricsPolicy;
  /** Share of simulated agent updates that fail (0–1). */
  agentFailureRate: number;
  oidc: { issuer?: string; clientId?: string; clientSecret?: string; redirectUri?: string; frontendUrl?: string };
  /** Browser origins (`scheme://host[:port]`) allowed to call the API cross-origin; empty: none. */
  corsOrigins: string[];
}

export const MIN_JWT_SECRET_BYTES = 32;

const cache = new WeakMap<object, Config>();

function parseSameSite(value: string | undefined): Config["cookie"]["sameSite"] {
  switch ((value ?? "lax").toLowerCase()) {
    case "strict": return "Strict";
    case "none": return "None";
    default: return "Lax";
  }
}

function parseBool(value: string | undefined, fallback: boolean): boolean {
  if (value === undefined || value === "") return fallback;
  return !["0", "false", "no", "off"].includes(value.toLowerCase());
}

/** A number in (0, max]; anything else (missing, malformed, out of range) is the fallback. */
function positive(value: string | undefined, fallback: number, max = Number.POSITIVE_INFINITY): number {
  if (value === undefined || value.trim() === "") return fallback;
  const n = Number(value);
  return Number.isFinite(n) && n > 0 && n <= max ? n : fallback;
}

function share(value: string | undefined, fallback: number): number {
  if (value === undefined || value.trim() === "") return fallback;
  const n = Number(value);
  return Number.isFinite(n) && n >= 0 && n <= 1 ? n : fallback;
}

/**
 * A comma-separated list of exact origins. A trailing slash is dropped (a browser's Origin never has
 * one); `null`, the origin of sandboxed frames and local files, is never accepted.
 */
function parseOrigins(value: string | undefined): string[] {
  const origins = (value ?? "").split(",").map((entry) => entry.trim().replace(/\/+$/, "")).filter((entry) => entry && entry !== "null");
  return [...new Set(origins)];
}

/** Reads the configuration once per bindings object (bindings are fixed for an isolate's life). */
export function readConfig(vars: Vars): Config {
  const cached = cache.get(vars);
  if (cached) return cached;
  const secret = new TextEncoder().encode(vars.JWT_SECRET ?? "");
  const environment = vars.ENVIRONMENT ?? "development";
  const isProduction = environment === "production";
  const config: Config = {
    environment,
    isProduction,
    jwt: secret.byteLength < MIN_JWT_SECRET_BYTES ? undefined : {
      secret,
      issuer: vars.JWT_ISSUER ?? "fleet-edge",
      audience: vars.JWT_AUDIENCE ?? "fleet-edge-api",
      lifetimeMinutes: positive(vars.ACCESS_TOKEN_MINUTES, 30),
    },
    cookie: { sameSite: parseSameSite(vars.COOKIE_SAMESITE), secure: parseBool(vars.COOKIE_SECURE, isProduction) },
    requestLogEnabled: parseBool(vars.REQUEST_LOG_ENABLED, true),
    limits: { requestBodyBytes: 1024 * 1024, deviceBodyBytes: 64 * 1024 },
    retention: { analyticsDays: 90 },
    metrics: {
      snapshotIntervalMs: positive(vars.METRICS_SNAPSHOT_INTERVAL_S, 300) * 1000,
      changeThreshold: positive(vars.METRICS_CHANGE_THRESHOLD_PERCENT, 5) / 100,
      zeroBaselineDelta: 1.0,
      errorRateDelta: positive(vars.METRICS_ERROR_RATE_DELTA, 0.01),
      retentionDays: positive(vars.METRICS_RETENTION_DAYS, 90),
    },
    agentFailureRate: share(vars.AGENT_FAILURE_RATE, 0.05),
    oidc: {
      issuer: vars.OIDC_ISSUER,
      clientId: vars.OIDC_CLIENT_ID,
      clientSecret: vars.OIDC_CLIENT_SECRET,
      redirectUri: vars.OIDC_REDIRECT_URI,
      frontendUrl: vars.FRONTEND_URL,
    },
    corsOrigins: parseOrigins(vars.CORS_ORIGINS),
  };
  cache.set(vars, config);
  return config;
}
