import type { Env } from "./env";
import { ApiError } from "./lib/errors";

export interface Config {
  environment: string;
  isProduction: boolean;
  jwt: { secret: Uint8Array; issuer: string; audience: string; lifetimeMinutes: number };
  cookie: { sameSite: "Strict" | "Lax" | "None"; secure: boolean };
  requestLogEnabled: boolean;
  bodyLimitBytes: number;
  deviceBodyLimitBytes: number;
  oidc: { issuer?: string; clientId?: string; clientSecret?: string; redirectUri?: string; frontendUrl?: string };
}

const MIN_SECRET_BYTES = 32;
const cache = new WeakMap<Env, Config>();

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

/**
 * Reads configuration from the bindings once per `env` object. A JWT secret shorter than 32 bytes
 * makes every request fail with 503: a Worker has no start-up step that could refuse to boot.
 */
export function loadConfig(env: Env): Config {
  const cached = cache.get(env);
  if (cached) return cached;
  const secret = new TextEncoder().encode(env.JWT_SECRET ?? "");
  if (secret.byteLength < MIN_SECRET_BYTES) {
    throw new ApiError(503, "Service misconfigured: JWT_SECRET must be at least 32 bytes");
  }
  const environment = env.ENVIRONMENT ?? "development";
  const isProduction = environment === "production";
  const minutes = Number(env.ACCESS_TOKEN_MINUTES ?? "30");
  const config: Config = {
    environment,
    isProduction,
    jwt: {
      secret,
      issuer: env.JWT_ISSUER ?? "fleet-edge",
      audience: env.JWT_AUDIENCE ?? "fleet-edge-api",
      lifetimeMinutes: Number.isFinite(minutes) && minutes > 0 ? minutes : 30,
    },
    cookie: { sameSite: parseSameSite(env.COOKIE_SAMESITE), secure: parseBool(env.COOKIE_SECURE, isProduction) },
    requestLogEnabled: parseBool(env.REQUEST_LOG_ENABLED, true),
    bodyLimitBytes: 1024 * 1024,
    deviceBodyLimitBytes: 64 * 1024,
    oidc: {
      issuer: env.OIDC_ISSUER,
      clientId: env.OIDC_CLIENT_ID,
      clientSecret: env.OIDC_CLIENT_SECRET,
      redirectUri: env.OIDC_REDIRECT_URI,
      frontendUrl: env.FRONTEND_URL,
    },
  };
  cache.set(env, config);
  return config;
}
