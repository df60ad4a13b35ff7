import type { DrizzleD1Database } from "drizzle-orm/d1";
import type * as schema from "./db/schema";
import type { Config, HubBindings } from "./shared/config";
import type { Role } from "./shared/vocabulary";
import type { SiteHub } from "../durable-objects/site-hub";
import type { CredentialGuard } from "../durable-objects/credential-guard";
import type { RolloutOrchestrator } from "../durable-objects/rollout-orchestrator";
import type { AuditStream } from "../durable-objects/audit-stream";

/**
 * The Worker's bindings: the database and variables the hubs get too (see src/shared/config.ts for
 * every variable), plus the hubs' namespace, the credential guards and rate limiters (see
 * docs/security.md), the static assets and the optional request-log sink.
 */
export interface Env extends HubBindings {
  SITE_HUB: DurableObjectNamespace<SiteHub>;
  CREDENTIAL_GUARD: DurableObjectNamespace<CredentialGuard>;
  /** One orchestrator per fleet-wide rollout (docs/rollouts.md). */
  ROLLOUTS: DurableObjectNamespace<RolloutOrchestrator>;
  /** The one audit fan-out point and chain sealer (docs/audit.md). */
  AUDIT_STREAM: DurableObjectNamespace<AuditStream>;
  /** Counts failed credential checks per client address (Workers Rate Limiting). */
  CREDENTIAL_FAILURE_LIMITER: RateLimit;
  /** Counts signups per client address (Workers Rate Limiting). */
  SIGNUP_LIMITER: RateLimit;
  ASSETS?: Fetcher;
  REQUEST_LOG_AE?: AnalyticsEngineDataset;
  /** Where the audit retention run writes its archives (docs/audit-retention.md). */
  AUDIT_ARCHIVE: R2Bucket;
  /** Secret: base64 of 32 bytes, the AES-256-GCM key of encrypted audit archives. */
  AUDIT_ARCHIVE_KEY?: string;
}

/** The configuration as a request sees it: the JWT settings are valid, or the request never got here. */
export type AppConfig = Config & { jwt: NonNullable<Config["jwt"]> };

export type Db = DrizzleD1Database<typeof schema>;

export interface AuthUser {
  id: number;
  email: string;
  username: string;
  fullName: string | null;
  isAdmin: boolean;
}

/** Who a device call claims to be: its id, its site, and its key (and the key's SHA-256), and where it comes from. */
export interface DeviceCredential {
  deviceId: string;
  siteId: string;
  keyDigest: string;
  apiKey: string;
  /** The caller's address as the throttles key it (see clientAddressOf); undefined when none was given. */
  client?: string;
}

export interface AuthDevice {
  deviceId: string;
  siteId: string;
}

export interface AppVariables {
  requestId: string;
  config: AppConfig;
  db: Db;
  user?: AuthUser;
  device?: AuthDevice;
  deviceCredential?: DeviceCredential;
  granted?: Granted;
}

/** What a route's access rule checked (src/middleware/access.ts): the site, the caller's role, the object named. */
export interface Granted {
  site: typeof schema.sites.$inferSelect;
  role: Role;
  device?: typeof schema.devices.$inferSelect;
  job?: typeof schema.jobs.$inferSelect;
  command?: typeof schema.commandIndex.$inferSelect;
}

export type AppEnv = { Bindings: Env; Variables: AppVariables };
