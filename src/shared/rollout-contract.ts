/**
 * The contract between the Worker and a rollout's orchestrator (the RolloutOrchestrator Durable
 * Object), and between the orchestrator and the site hubs it hands work to: every record that
 * crosses those boundaries, as zod schemas (docs/rollouts.md). The Worker's client
 * (src/hub/rollouts.ts) and the orchestrator parse every reply against them.
 */
import { z } from "@hono/zod-openapi";

const json = z.record(z.string(), z.unknown());

export const ROLLOUT_STATUSES = ["scheduled", "running", "paused", "completed", "aborted"] as const;
export type RolloutStatus = (typeof ROLLOUT_STATUSES)[number];

/** A device's place in a rollout. `executing` and `recovering` both take one place in its site's budget. */
export const TARGET_STATES = ["pending", "executing", "recovering", "succeeded", "failed", "skipped"] as const;
export type TargetState = (typeof TARGET_STATES)[number];

export const ROLLOUT_CONTROLS = ["pause", "resume", "abort", "promote"] as const;
export type RolloutControl = (typeof ROLLOUT_CONTROLS)[number];

export const AbortCriteriaSchema = z.object({
  maxFailureRate: z.number(),
  minExecutions: z.number().int(),
  maxFailures: z.number().int().nullable(),
  offlineCountsAsFailure: z.boolean(),
});
export type AbortCriteria = z.infer<typeof AbortCriteriaSchema>;

export const RolloutTargetSchema = z.object({ deviceId: z.string(), siteId: z.string(), wave: z.number().int() });
export type RolloutTarget = z.infer<typeof RolloutTargetSchema>;

/** Everything the orchestrator needs to run a rollout: the plan the Worker computed from the request. */
export const RolloutPlanSchema = z.object({
  rolloutId: z.string(),
  name: z.string(),
  action: z.string(),
  configUrl: z.string().nullable(),
  configVersion: z.string().nullable(),
  payload: json.nullable(),
  createdBy: z.string(),
  createdByUserId: z.number().int(),
  sites: z.array(z.object({ siteId: z.string(), timeZone: z.string(), budget: z.number().int().positive() })),
  targets: z.array(RolloutTargetSchema),
  waveCount: z.number().int().nonnegative(),
  soakSeconds: z.number().int().nonnegative(),
  abort: AbortCriteriaSchema,
  window: z.object({ startLocal: z.string(), endLocal: z.string() }).nullable(),
  rollback: z.object({ action: z.string(), payload: json.nullable() }).nullable(),
  /** How long one device's execution may take before its job times out. */
  executionDeadlineS: z.number().int().positive(),
  /** How long a changed device may take to come back online and healthy before it counts as not recovered. */
  recoveryTimeoutS: z.number().int().positive(),
});
export type RolloutPlan = z.infer<typeof RolloutPlanSchema>;

export const TargetCountsSchema = z.object({
  total: z.number().int(),
  pending: z.number().int(),
  running: z.number().int().openapi({ description: "Executing, or changed and not yet back online and healthy" }),
  succeeded: z.number().int(),
  failed: z.number().int().openapi({ description: "The execution failed or timed out, or the device came back unhealthy (or stayed offline, when offline counts as failure)" }),
  skipped: z.number().int().openapi({ description: "Never started (the rollout was aborted) or cancelled while queued" }),
}).openapi("RolloutCounts");
export type TargetCounts = z.infer<typeof TargetCountsSchema>;

export const RolloutProgressSchema = z.object({
  rollout_id: z.string(),
  status: z.enum(ROLLOUT_STATUSES),
  current_wave: z.number().int().openapi({ description: "1-based; 0 before the first device starts" }),
  wave_count: z.number().int(),
  abort_reason: z.string().nullable(),
  soak_until: z.string().nullable().openapi({ description: "While the current wave soaks: when the next wave may start" }),
  started_at: z.string().nullable(),
  finished_at: z.string().nullable(),
  counts: TargetCountsSchema,
  waves: z.array(z.object({ wave: z.number().int(), counts: TargetCountsSchema })),
  sites: z.array(z.object({
    site_id: z.string(),
    budget: z.number().int().openapi({ description: "Devices of this site that may be executing or recovering at once" }),
    max_in_flight: z.number().int().openapi({ description: "The most devices of this site that were executing or recovering at the same time so far" }),
    counts: TargetCountsSchema,
  })),
});
export type RolloutProgress = z.infer<typeof RolloutProgressSchema>;

export const ControlResultSchema = z.discriminatedUnion("ok", [
  z.object({ ok: z.literal(true), status: z.enum(ROLLOUT_STATUSES) }),
  z.object({ ok: z.literal(false), status: z.enum(ROLLOUT_STATUSES), detail: z.string() }),
]);
export type ControlResult = z.infer<typeof ControlResultSchema>;

/** Who asked for a control (null: the orchestrator itself). */
export const ActorSchema = z.object({ userId: z.number().int(), email: z.string() }).nullable();
export type Actor = z.infer<typeof ActorSchema>;

// ---- progress stream (Worker → orchestrator) ---------------------------------------------------

/** Keep-alive comment interval on an open rollout progress stream. */
export const ROLLOUT_EVENTS_KEEPALIVE_MS = 20_000;
/** What a client's EventSource waits before reconnecting to a stream that ended. */
export const ROLLOUT_EVENTS_RETRY_MS = 3_000;

/** The subscribe request's URL: who subscribes (for revocation) and the last id the client got. */
export function rolloutEventsUrl(userId: number, lastEventId: number | undefined): string {
  const url = new URL("https://rollout-orchestrator.internal/events");
  url.searchParams.set("user_id", String(userId));
  if (lastEventId !== undefined) url.searchParams.set("last_event_id", String(lastEventId));
  return url.toString();
}

export const RolloutEventsRequestSchema = z.object({
  user_id: z.coerce.number().int(),
  last_event_id: z.coerce.number().int().min(0).optional(),
});

// ---- orchestrator → site hub ----------------------------------------------------------------

/**
 * One device of a rollout job as its site hub sees it. `execution`: the job target's status (an open
 * command status while it runs). `condition`: the device itself — `busy` (an update or reboot still in
 * progress), `healthy` (online and healthy), `unhealthy` (reporting an error or a fault), `offline`.
 */
export const RolloutDeviceReportSchema = z.object({
  job_id: z.string(),
  device_id: z.string(),
  execution: z.string(),
  error: z.string().nullable(),
  condition: z.enum(["busy", "healthy", "unhealthy", "offline"]),
});
export type RolloutDeviceReport = z.infer<typeof RolloutDeviceReportSchema>;
