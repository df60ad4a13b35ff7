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
  REQUEST_LOG_RETENTION_DAYS?: string;
  ANALYTICS_ENABLED?: string;
  ANALYTICS_RETENTION_DAYS?: string;
  METRICS_SNAPSHOT_INTERVAL_S?: string;
  METRICS_CHANGE_THRESHOLD_PERCENT?: string;
  METRICS_ERROR_RATE_DELTA?: string;
  METRICS_RETENTION_DAYS?: string;
  AGENT_FAILURE_RATE?: string;
  BOOTSTRAP_ENROLMENTS_PER_HOUR?: string;
  OIDC_ISSUER?: string;
  OIDC_CLIENT_ID?: string;
  OIDC_CLIENT_SECRET?: string;
  OIDC_REDIRECT_URI?: string;
  OIDC_SCOPES?: string;
  FRONTEND_URL?: string;
  CORS_ORIGINS?: string;
  LIVE_MAX_SUBSCRIPTIONS_PER_USER?: string;
  LIVE_MAX_SUBSCRIPTIONS_PER_SITE?: string;
  // Web Push to signed-in users' browsers (docs/push.md); PUSH_TEST_LOOPBACK_ENDPOINTS is for tests only.
  VAPID_PUBLIC_KEY?: string;
  VAPID_PRIVATE_KEY?: string;
  VAPID_SUBJECT?: string;
  PUSH_TEST_LOOPBACK_ENDPOINTS?: string;
  // Vendor push to devices (docs/push.md); the PUSH_TEST_* base URLs are for tests only.
  FCM_SERVICE_ACCOUNT?: string;
  APNS_KEY_ID?: string;
  APNS_TEAM_ID?: string;
  APNS_PRIVATE_KEY?: string;
  APNS_TOPIC?: string;
  APNS_ENVIRONMENT?: string;
  PUSH_TEST_FCM_BASE_URL?: string;
  PUSH_TEST_APNS_BASE_URL?: string;
  // Audit alerts (src/shared/audit-settings.ts, docs/audit.md)
  ALERT_EMAIL_FROM?: string;
  AUDIT_ALLOW_LOOPBACK_RECEIVERS?: string;
  AUDIT_DELIVERY_RETRY_BASE_MS?: string;
}

/** What a site hub is given: the database and the variables (the Worker's Env adds its own bindings). */
export interface HubBindings extends Vars {
  DB: D1Database;
  /** The audit stream (docs/audit.md): a hub nudges it after its outbox wrote audit rows. */
  AUDIT_STREAM?: DurableObjectNamespace;
  /** Cloudflare's send_email binding, for alert e-mails (docs/audit.md). */
  ALERT_EMAIL?: SendEmail;
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
  /** Analytics collection: the collection endpoints, the request log and its rollups (docs/analytics.md). */
  analyticsEnabled: boolean;
  limits: {
    /** Any request body. */
    requestBodyBytes: number;
    /** Calls terminals make (heartbeat, telemetry, command results): far smaller than operators'. */
    deviceBodyBytes: number;
    /** Analytics reports (user activity, errors, state changes, job outcomes). */
    analyticsBodyBytes: number;
  };
  retention: {
    /** Every analytics table: user activity, state history, job outcomes, errors and the rollups. */
    analyticsDays: number;
    /** Raw request-log rows in D1 (the rollups keep the aggregates for `analyticsDays`). */
    requestLogDays: number;
  };
  metrics: MetricsPolicy;
  /** Share of simulated agent updates that fail (0–1). */
  agentFailureRate: number;
  enrolment: {
    /** Devices one site may enrol with its bootstrap key in any rolling hour. */
    bootstrapPerHour: number;
  };
  /** OpenID Connect login (docs/oidc.md); blank variables read as unset. */
  oidc: { issuer?: string; clientId?: string; clientSecret?: string; redirectUri?: string; scopes: string; frontendUrl?: string };
  /** Origins besides the service's own that browsers may call from (exact `scheme://host[:port]`). */
  corsOrigins: string[];
  /** Open live subscriptions (WebSockets and event streams together) a site's hub accepts. */
  live: { maxSubscriptionsPerUser: number; maxSubscriptionsPerSite: number };
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

/** A whole number in [1, max]; anything else is the fallback. */
function positiveInteger(value: string | undefined, fallback: number, max: number): number {
  const n = positive(value, fallback, max);
  return Number.isInteger(n) ? n : fallback;
}

/** Comma-separated origins, each normalised to its serialised form; entries that are not URLs are dropped. */
function parseOrigins(value: string | undefined): string[] {
  const origins = new Set<string>();
  for (const entry of (value ?? "").split(",")) {
    const trimmed = entry.trim();
    if (!trimmed) continue;
    try {
      const origin = new URL(trimmed).origin;
      if (origin !== "null") origins.add(origin);
    } catch {
      // not a URL: ignored, like any malformed variable
    }
  }
  return [...origins];
}

/** A string variable, trimmed; blank is unset. */
function setting(value: string | undefined): string | undefined {
  const trimmed = value?.trim();
  return trimmed ? trimmed : undefined;
}

/** Space- or comma-separated scopes; `openid` is always requested, since login needs the ID token. */
function parseScopes(value: string | undefined): string {
  const scopes = new Set((value ?? "openid email profile").split(/[\s,]+/).filter(Boolean));
  return ["openid", ...[...scopes].filter((scope) => scope !== "openid")].join(" ");
}

/** A whole number ≥ 1; anything else is the fallback. */
function count(value: string | undefined, fallback: number): number {
  if (value === undefined || value.trim() === "") return fallback;
  const n = Number(value);
  return Number.isSafeInteger(n) && n >= 1 ? n : fallback;
}

function share(value: string | undefined, fallback: number): number {
  if (value === undefined || value.trim() === "") return fallback;
  const n = Number(value);
  return Number.isFinite(n) && n >= 0 && n <= 1 ? n : fallback;
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
    analyticsEnabled: parseBool(vars.ANALYTICS_ENABLED, true),
    limits: { requestBodyBytes: 1024 * 1024, deviceBodyBytes: 64 * 1024, analyticsBodyBytes: 64 * 1024 },
    retention: {
      analyticsDays: positive(vars.ANALYTICS_RETENTION_DAYS, 90, 3650),
      requestLogDays: positive(vars.REQUEST_LOG_RETENTION_DAYS, 7, 3650),
    },
    metrics: {
      snapshotIntervalMs: positive(vars.METRICS_SNAPSHOT_INTERVAL_S, 300) * 1000,
      changeThreshold: positive(vars.METRICS_CHANGE_THRESHOLD_PERCENT, 5) / 100,
      zeroBaselineDelta: 1.0,
      errorRateDelta: positive(vars.METRICS_ERROR_RATE_DELTA, 0.01),
      retentionDays: positive(vars.METRICS_RETENTION_DAYS, 90),
    },
    agentFailureRate: share(vars.AGENT_FAILURE_RATE, 0.05),
    enrolment: { bootstrapPerHour: count(vars.BOOTSTRAP_ENROLMENTS_PER_HOUR, 100) },
    oidc: {
      issuer: setting(vars.OIDC_ISSUER),
      clientId: setting(vars.OIDC_CLIENT_ID),
      clientSecret: setting(vars.OIDC_CLIENT_SECRET),
      redirectUri: setting(vars.OIDC_REDIRECT_URI),
      scopes: parseScopes(vars.OIDC_SCOPES),
      frontendUrl: setting(vars.FRONTEND_URL)?.replace(/\/+$/, ""),
    },
    corsOrigins: parseOrigins(vars.CORS_ORIGINS),
    live: {
      maxSubscriptionsPerUser: positiveInteger(vars.LIVE_MAX_SUBSCRIPTIONS_PER_USER, 10, 100_000),
      maxSubscriptionsPerSite: positiveInteger(vars.LIVE_MAX_SUBSCRIPTIONS_PER_SITE, 1000, 1_000_000),
    },
  };
  cache.set(vars, config);
  return config;
}
