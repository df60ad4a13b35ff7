/**
 * The contract between the Worker and a site's hub (the SiteHub Durable Object): every record that
 * crosses that boundary, as zod schemas. The TypeScript types both sides use are inferred from them,
 * the hub client (src/hub/client.ts) parses every reply against them where it comes back, and the
 * route schemas reuse them for the API's bodies, so a shape is written once.
 */
import { z } from "@hono/zod-openapi";
import { LIFECYCLE_STATES } from "./device-lifecycle";
import {
  AGENT_STATES, COMMAND_STATUSES, DIAGNOSTIC_COMPONENTS, JOB_STATUSES, LIVE_STATUSES, ROLES, SERIES_KINDS,
} from "./vocabulary";

const json = z.record(z.string(), z.unknown());

// ---- outcomes ---------------------------------------------------------------------------------

/** A hub method's refusal: the status and detail the API answers with. */
export const HubErrorSchema = z.object({
  status: z.union([z.literal(404), z.literal(409), z.literal(422), z.literal(429), z.literal(412), z.literal(413)]),
  detail: z.string(),
  retryAfterS: z.number().int().positive().optional(),
});
export type HubError = z.infer<typeof HubErrorSchema>;

/** `{ok: true, value}` or `{ok: false, error}`: hub methods that can refuse answer one of these. */
export const outcomeOf = <T extends z.ZodType>(value: T) =>
  z.discriminatedUnion("ok", [z.object({ ok: z.literal(true), value }), z.object({ ok: z.literal(false), error: HubErrorSchema })]);
export type Outcome<T> = { ok: true; value: T } | { ok: false; error: HubError };

export const ok = <T>(value: T): Outcome<T> => ({ ok: true, value });
export const refuse = <T = never>(status: HubError["status"], detail: string, retryAfterS?: number): Outcome<T> =>
  ({ ok: false, error: retryAfterS ? { status, detail, retryAfterS } : { status, detail } });

/** The liveness probe's answer: the hub ran and read its own storage. */
export const PingSchema = z.object({ ok: z.literal(true), events: z.number().int() });

// ---- device admission and the hot path ----------------------------------------------------------

export const AdmissionSchema = z.discriminatedUnion("result", [
  z.object({ result: z.literal("ok") }),
  /** The key has not been checked against this hash yet: the Worker runs bcrypt and confirms. */
  z.object({ result: z.literal("verify"), bcryptHash: z.string() }),
  z.object({ result: z.literal("unknown") }),
  z.object({ result: z.literal("inactive"), state: z.string() }),
]);
export type Admission = z.infer<typeof AdmissionSchema>;

/** What a hub method answers instead of doing its work when the key is not (yet) admitted. */
export const NotAdmittedSchema = z.object({
  notAdmitted: z.discriminatedUnion("result", [
    z.object({ result: z.literal("verify"), bcryptHash: z.string() }),
    z.object({ result: z.literal("unknown") }),
    z.object({ result: z.literal("inactive"), state: z.string() }),
  ]),
});
export type NotAdmitted = z.infer<typeof NotAdmittedSchema>;

/** A bootstrap enrolment's place in its site's hourly quota. */
export const EnrolmentSlotSchema = z.object({ slot: z.string() });

export const RateLimitedSchema = z.object({ rateLimited: z.literal(true), retryAfterS: z.number().int().positive() });
export type RateLimited = z.infer<typeof RateLimitedSchema>;

/** A heartbeat (or a sign of life carried by telemetry), as the Worker has validated it. */
export const SightingSchema = z.object({
  deviceId: z.string(),
  /** What the device says about itself; absent means "alive and well". */
  reportedStatus: z.enum(["online", "error"]).optional(),
  /** The device's own heartbeat interval, when it reports one. */
  intervalS: z.number().int().positive().optional(),
  bootId: z.string().optional(),
  uptimeS: z.number().int().nonnegative().optional(),
  reportedAt: z.string().optional(),
});
export type Sighting = z.infer<typeof SightingSchema>;

export const HeartbeatResultSchema = z.object({
  status: z.enum(LIVE_STATUSES),
  next_heartbeat_s: z.number().int(),
  server_time: z.string(),
  /** The device's effective twin version: when it differs from the one the device holds, it fetches its twin. */
  desired_version: z.number().int(),
});
export type HeartbeatResult = z.infer<typeof HeartbeatResultSchema>;
export const HeartbeatReplySchema = z.union([HeartbeatResultSchema, RateLimitedSchema, NotAdmittedSchema]);

export const SampleSchema = z.object({
  cpu_usage: z.number(),
  memory_usage: z.number(),
  disk_usage: z.number(),
  temperature: z.number().optional(),
  network_latency_ms: z.number().optional(),
  transaction_count: z.number().optional(),
  uptime_seconds: z.number().optional(),
  error_rate: z.number().optional(),
  boot_id: z.string().optional(),
  timestamp: z.string().optional(),
});
export type Sample = z.infer<typeof SampleSchema>;

export const STORE_REASONS = ["first_sample", "snapshot_interval", "changed", "unchanged"] as const;
export type StoreReason = (typeof STORE_REASONS)[number];
export const StoreDecisionSchema = z.object({
  stored: z.boolean(),
  reason: z.enum(STORE_REASONS).openapi({ description: "first_sample (first, or first after a device restart), snapshot_interval, changed (moved beyond the threshold) or unchanged" }),
});
export type StoreDecision = z.infer<typeof StoreDecisionSchema>;
export const TelemetryReplySchema = z.union([z.array(StoreDecisionSchema), RateLimitedSchema, NotAdmittedSchema]);

export const MetricsHistoryRowSchema = z.object({
  recorded_at: z.string(),
  cpu: z.number(),
  memory: z.number(),
  disk: z.number(),
  temperature: z.number().nullable(),
  latency: z.number().nullable(),
  transaction_count: z.number().nullable(),
  uptime_s: z.number().nullable(),
  error_rate: z.number().nullable(),
  reason: z.string(),
});

// ---- site health ------------------------------------------------------------------------------

export const SiteHealthDeviceSchema = z.object({
  device_id: z.string(),
  name: z.string(),
  type: z.string(),
  status: z.string(),
  ip_address: z.string().nullable(),
  last_seen: z.string().nullable(),
});
export type SiteHealthDevice = z.infer<typeof SiteHealthDeviceSchema>;

/**
 * One device of a site's roster: the hub's copy of the device's row in D1 with its live status and
 * last_seen laid over it (the site's device list).
 */
export const RosterDeviceSchema = z.object({
  site_id: z.string(),
  device_id: z.string(),
  name: z.string(),
  device_type: z.string(),
  status: z.string(),
  ip_address: z.string().nullable(),
  device_source: z.enum(["real", "simulated"]),
  enrollment_method: z.string(),
  lifecycle_state: z.enum(LIFECYCLE_STATES),
  last_seen: z.string().nullable(),
  created_at: z.string(),
  updated_at: z.string(),
});
export type RosterDevice = z.infer<typeof RosterDeviceSchema>;

export const SiteHealthSchema = z.object({
  site_id: z.string(),
  total_devices: z.number().int(),
  healthy_devices: z.number().int(),
  offline_devices: z.number().int(),
  error_devices: z.number().int(),
  health_percentage: z.number(),
  status_summary: z.string(),
  devices: z.array(SiteHealthDeviceSchema),
  last_updated: z.string(),
  twin_in_sync_devices: z.number().int().openapi({ description: "Devices whose reported state matches their effective desired state" }),
  twin_drifted_devices: z.number().int().openapi({ description: "Devices whose reported state differs from it (GET /api/v1/sites/{site_id}/drift lists them)" }),
}).openapi("SiteHealth");
export type SiteHealth = z.infer<typeof SiteHealthSchema>;

/**
 * Site health already serialised by the hub: `head`, then `last_updated` as a JSON string, then
 * `tail`. The hub serialises once per change of the site and each answer adds its time, so a read
 * carries one string across instead of an object per device.
 */
export const SiteHealthJsonSchema = z.object({ head: z.string(), last_updated: z.string(), tail: z.string() });
export type SiteHealthJson = z.infer<typeof SiteHealthJsonSchema>;

// ---- commands ---------------------------------------------------------------------------------

export const CommandRecordSchema = z
  .object({
    command_id: z.string().openapi({ description: "UUIDv4; a redelivered command keeps its id, so devices dedupe on it" }),
    device_id: z.string(),
    site_id: z.string(),
    command_type: z.string().openapi({ example: "restart" }),
    payload: json,
    status: z.enum(COMMAND_STATUSES),
    attempts: z.number().int().openapi({ description: "How many times it was delivered" }),
    created_at: z.string(),
    delivered_at: z.string().nullable().openapi({ description: "The latest delivery" }),
    acknowledged_at: z.string().nullable(),
    completed_at: z.string().nullable().openapi({ description: "When it reached its final state (completed, failed, expired or cancelled)" }),
    expires_at: z.string(),
    result: z.unknown().openapi({ description: "What the device reported (any JSON), null until then" }),
    error_message: z.string().nullable(),
    created_by: z.string().nullable(),
  })
  .openapi("Command");
export type CommandRecord = z.infer<typeof CommandRecordSchema>;

export const QueueInputSchema = z.object({
  deviceId: z.string(),
  /** Any spelling; the hub normalises it (an invalid name is refused with 422). */
  commandType: z.string(),
  payload: json.optional(),
  ttlSeconds: z.number().int().optional(),
  createdBy: z.string().nullable().optional(),
  /** The user who asked (audit). */
  userId: z.number().int().nullable().optional(),
  idempotencyKey: z.string().nullable().optional(),
  /** The device's agent runs in the hub (device_source = simulated). */
  simulated: z.boolean().optional(),
  jobId: z.string().nullable().optional(),
  /** Extra wording for the command_queued audit description. */
  reason: z.string().optional(),
});
export type QueueInput = z.infer<typeof QueueInputSchema>;

export const QueuedCommandSchema = z.object({
  command: CommandRecordSchema,
  created: z.boolean(),
  /** The device had its channel open and the command went out on it at once (leased as by a poll). */
  delivered_on_channel: z.boolean(),
});

export const CommandReportSchema = z.object({
  status: z.enum(["completed", "failed"]),
  result: z.unknown().optional(),
  errorMessage: z.string().nullable().optional(),
});
export type CommandReport = z.infer<typeof CommandReportSchema>;

export const AckBodySchema = z
  .object({ message: z.string(), command_id: z.string(), acknowledged_at: z.string().nullable() })
  .openapi("CommandAck");
export type AckBody = z.infer<typeof AckBodySchema>;

export const CommandPageSchema = z.object({ commands: z.array(CommandRecordSchema), total: z.number().int() });

// ---- jobs -------------------------------------------------------------------------------------

export const JobStatusSchema = z.enum(JOB_STATUSES);

/** What the hub needs to run a job (a copy of the D1 row, as created). */
export const JobSpecSchema = z.object({
  jobId: z.string(),
  action: z.string(),
  description: z.string().nullable(),
  priority: z.string(),
  targetDeviceIds: z.array(z.string()).nullable(),
  deviceType: z.string().nullable(),
  configUrl: z.string().nullable(),
  configVersion: z.string().nullable(),
  createdBy: z.string().nullable(),
  createdAt: z.string(),
  deadlineAt: z.string(),
  segment: z.string().optional(),
  startedAt: z.string().optional(),
  /** Extra command payload fields (a rollout's payload beyond config_url/config_version). */
  payload: json.nullable().optional(),
});
export type JobSpec = z.infer<typeof JobSpecSchema>;

export const JobCountsSchema = z.object({
  total: z.number().int(),
  succeeded: z.number().int(),
  failed: z.number().int().openapi({ description: "Failed or expired" }),
  cancelled: z.number().int().openapi({ description: "Cancelled before they ran (job cancelled or timed out)" }),
  pending: z.number().int(),
  skipped: z.number().int().openapi({ description: "Not sent: the device's owner has not granted a permission the job's command needs (the execution's error_message names it)" }),
}).openapi("JobCounts");

// ---- live channel -----------------------------------------------------------------------------

export const LiveEventSchema = z
  .object({
    seq: z.number().int().openapi({ description: "Increases by one per event of the site; resume with ?since=<seq> or Last-Event-ID" }),
    type: z.string().openapi({
      description: "device.status, device.heartbeat (coalesced, at most one every 2 s), device.metrics (a stored sample), agent.state, agent.health, agent.push, command.updated, job.updated, intent.updated, rollout.progress; and stream.truncated (you missed events older than the replay ring: reload). The hub's own messages without a seq (stream.error, stream.revoked) are LiveControlMessage.",
      example: "device.status",
    }),
    site_id: z.string(),
    ts: z.string().openapi({ description: "When the event was published (ISO 8601, UTC)" }),
    data: z.unknown().openapi({ description: "Depends on type; device.status: {device_id, previous, status, reason, at}; agent.state: {device_id, previous, state, config_version, target_version, at, error?}" }),
  })
  .openapi("LiveEvent");
export type LiveEvent = z.infer<typeof LiveEventSchema>;

export const ChannelHeadSchema = z.object({ last_seq: z.number().int(), oldest_seq: z.number().int() });

const RoleSchema = z.enum(ROLES);

/**
 * Who a live subscription belongs to; the hub keeps it with the socket or stream. `role` is the role
 * the Worker authorised it with; `ticket_id` (the SHA-256 of the one-use ticket) when a ticket opened it.
 */
export const SubscriberSchema = z.object({
  user_id: z.number().int(),
  connected_at: z.string(),
  channel: z.enum(["ws", "sse"]),
  role: RoleSchema,
  ticket_id: z.string().optional(),
});
export type Subscriber = z.infer<typeof SubscriberSchema>;
/** The request header that carries the subscriber from the Worker to the hub. */
export const SUBSCRIBER_HEADER = "X-Fleet-Subscriber";

export const SubscribersSchema = z.object({
  websockets: z.number().int(),
  sse: z.number().int(),
  users: z.array(z.number().int()),
  subscriptions: z.array(SubscriberSchema.pick({ user_id: true, channel: true, role: true })),
});

/**
 * A user's access to the site changed: `role: null` ends their subscriptions (only the one a ticket
 * opened, given `ticket_id`); a role is what they keep, recorded on their open subscriptions.
 */
export const RevocationSchema = z.object({
  user_id: z.number().int(),
  role: RoleSchema.nullable(),
  ticket_id: z.string().optional(),
});
export type Revocation = z.infer<typeof RevocationSchema>;
export const RevocationResultSchema = z.object({ closed: z.number().int(), downgraded: z.number().int() });
export type RevocationResult = z.infer<typeof RevocationResultSchema>;

/** The WebSocket close code and reason of a subscription whose access was revoked. */
export const LIVE_REVOKED_CLOSE_CODE = 4403;
export const LIVE_REVOKED_REASON = "access revoked";

/**
 * What the hub itself says on the channel, besides events: `stream.error` (a client message it
 * could not honour; `code: "replay_rate_limited"` with `retry_after_s` when replays come too fast)
 * and `stream.revoked` (access was revoked; the connection ends right after it).
 */
export const LiveControlMessageSchema = z
  .object({
    type: z.enum(["stream.error", "stream.revoked"]),
    site_id: z.string(),
    ts: z.string(),
    data: z.object({
      detail: z.string(),
      code: z.enum(["bad_message", "replay_rate_limited", "access_revoked"]).optional(),
      retry_after_s: z.number().int().positive().optional(),
    }),
  })
  .openapi("LiveControlMessage");
export type LiveControlMessage = z.infer<typeof LiveControlMessageSchema>;

// ---- agents -----------------------------------------------------------------------------------

const SERVICE = z.enum(["running", "connected", "online", "error", "disconnected", "offline"]);

/** A device health record; a real device's may be partial (it reports what it reports). */
export const HealthRecordSchema = z
  .object({
    status: z.enum(["healthy", "unhealthy"]),
    config_version: z.string().optional(),
    last_restart: z.string().optional(),
    response_time_ms: z.number().int().optional(),
    device_info: z.object({
      model: z.string().optional(),
      firmware: z.string().optional(),
      os: z.string().optional(),
      memory_mb: z.number().optional(),
      storage_gb: z.number().optional(),
      uptime_hours: z.number().optional(),
    }).optional(),
    services: z.object({ pos_app: SERVICE.optional(), payment_gateway: SERVICE.optional(), database: SERVICE.optional(), network: SERVICE.optional() }).optional(),
    metrics: z.object({
      cpu_usage_percent: z.number().optional(),
      memory_usage_percent: z.number().optional(),
      disk_usage_percent: z.number().optional(),
      transactions_today: z.number().optional(),
      uptime_seconds: z.number().optional(),
      temperature_celsius: z.number().optional(),
      network_latency_ms: z.number().optional(),
      error_rate: z.number().optional(),
    }).optional(),
    error: z.string().optional().openapi({ description: "Present when unhealthy" }),
    checked_at: z.string(),
  })
  .openapi("DeviceHealthRecord", { description: "A simulated agent's record carries every field; a real device's only what it reported (latest telemetry, presence, DNA)." });
export type PartialHealth = z.infer<typeof HealthRecordSchema>;

/** Device facts the Worker already holds (it has authorised the caller on the device). */
export const AgentDeviceSchema = z.object({
  deviceId: z.string(),
  name: z.string(),
  deviceType: z.string(),
  source: z.enum(["real", "simulated"]),
  lifecycleState: z.string(),
  createdAt: z.string(),
  firmware: z.string().nullable(),
  osType: z.string().nullable(),
  osVersion: z.string().nullable(),
  osDetails: z.string().nullable(),
  hostname: z.string().nullable(),
  dna: json.nullable(),
});
export type AgentDevice = z.infer<typeof AgentDeviceSchema>;

export const AgentStateSchema = z.enum(AGENT_STATES).openapi({ description: "Agent lifecycle state (lower-case)" });

export const LiveMetricsSchema = z.object({
  cpu_usage: z.number().nullable(),
  memory_usage: z.number().nullable(),
  disk_usage: z.number().nullable(),
  temperature: z.number().nullable(),
  uptime: z.number().nullable(),
  network_latency: z.number().nullable(),
  transaction_count: z.number().nullable(),
});

export const AgentSnapshotSchema = z.object({
  device_id: z.string(),
  source: z.enum(["real", "simulated"]),
  state: AgentStateSchema,
  state_since: z.string().nullable(),
  config_version: z.string().nullable(),
  target_version: z.string().nullable(),
  next_transition_at: z.string().nullable(),
  status: z.string(),
  last_heartbeat: z.string().nullable(),
  health: HealthRecordSchema,
  uptime_seconds: z.number().int().nullable(),
  configuration: json.nullable(),
  simulation: z.object({ seed: z.number().int(), failure_rate: z.number(), updates: z.number().int(), boot_count: z.number().int() }).nullable(),
  live_metrics: LiveMetricsSchema.nullable(),
});
export type AgentSnapshot = z.infer<typeof AgentSnapshotSchema>;

export const AgentHealthReplySchema = z.object({ health: HealthRecordSchema, agent_state: AgentStateSchema, last_updated: z.string() });

export const DiagnosticResultSchema = z.object({
  status: z.enum(["pass", "warn", "fail", "unknown"]),
  detail: z.string(),
  duration_ms: z.number().int().optional(),
});
export type DiagnosticResult = z.infer<typeof DiagnosticResultSchema>;

export const AgentLogEntrySchema = z.object({ timestamp: z.string(), kind: z.string(), level: z.string(), message: z.string(), data: z.unknown() });
export type AgentLogEntry = z.infer<typeof AgentLogEntrySchema>;

export const DiagnosticsInputSchema = z.object({
  components: z.array(z.enum(DIAGNOSTIC_COMPONENTS)),
  includeLogs: z.boolean(),
  mode: z.string(),
});
export const DiagnosticsReplySchema = z.object({
  health: HealthRecordSchema,
  agent_state: AgentStateSchema,
  diagnostics: z.record(z.string(), DiagnosticResultSchema),
  logs: z.array(AgentLogEntrySchema).optional(),
  timestamp: z.string(),
});

export const RestartReplySchema = z.object({
  previous_health: HealthRecordSchema,
  health_check: HealthRecordSchema,
  reboot_time_seconds: z.number(),
  agent_state: AgentStateSchema,
});

/** Every body form of a push to an agent (already validated by the route). */
export const PushInputSchema = z.object({
  title: z.string().optional(),
  body: z.string().optional(),
  data: json.optional(),
  message: z.string().optional(),
  priority: z.string().optional(),
  action: z.string().optional(),
  config_version: z.string().optional(),
  config: json.optional(),
  force: z.boolean().optional(),
  backup_data: z.boolean().optional(),
});
export type PushInput = z.infer<typeof PushInputSchema>;

export const PushResultSchema = z.object({
  status: z.enum(["delivered", "accepted", "in_progress", "up_to_date", "completed"]),
  message: z.string(),
  timestamp: z.string(),
  state: AgentStateSchema,
  config_version: z.string(),
  target_version: z.string().optional(),
  health_check: HealthRecordSchema.optional(),
  result: json.optional(),
});
export type PushResult = z.infer<typeof PushResultSchema>;

export const SeriesRequestSchema = z.object({ kind: z.enum(SERIES_KINDS), fromMs: z.number(), bucketMs: z.number().positive() });
export type SeriesRequest = z.infer<typeof SeriesRequestSchema>;

const nullableNumber = z.number().nullable();
export const SeriesReplySchema = z.discriminatedUnion("kind", [
  z.object({
    kind: z.literal("metrics"),
    rows: z.array(z.object({
      bucket: z.number(), samples: z.number(), cpu_avg: nullableNumber, cpu_max: nullableNumber, memory_avg: nullableNumber, memory_max: nullableNumber,
      disk_avg: nullableNumber, disk_max: nullableNumber, temperature_avg: nullableNumber, latency_avg: nullableNumber, latency_max: nullableNumber,
      error_rate_avg: nullableNumber,
    })),
  }),
  z.object({
    kind: z.literal("transactions"),
    rows: z.array(z.object({ bucket: z.number(), transactions: z.number() })),
    latest: nullableNumber,
  }),
  z.object({
    kind: z.literal("errors"),
    rows: z.array(z.object({ bucket: z.number(), errors: z.number(), error_rate_avg: nullableNumber })),
    events: z.array(AgentLogEntrySchema),
  }),
]);
export type SeriesReply = z.infer<typeof SeriesReplySchema>;

// ---- push fan-out ---------------------------------------------------------------------------
// Push sends queue many commands on one site at once: one call per site instead of one per
// device, each command refused or queued on its own (a device at its open-commands cap fails
// alone, the rest still go out).

export const QueuedBatchSchema = z.array(outcomeOf(QueuedCommandSchema));

// ---- the assistant's assessments (computed in the hub by src/shared/ai-engine.ts) ---------------

const AI_METRIC_NAMES = ["cpu", "memory", "disk", "temperature", "latency", "error_rate"] as const;

export const AnomalyReasonSchema = z
  .object({
    metric: z.enum(AI_METRIC_NAMES),
    value: z.number(),
    baseline: z.number().openapi({ description: "The baseline's centre (median)" }),
    spread: z.number().openapi({ description: "The baseline's robust standard deviation (scaled MAD, with a per-metric floor)" }),
    deviation: z.number().openapi({ description: "(value − baseline) / spread" }),
    message: z.string(),
  })
  .openapi("AnomalyReason");

const BASIS = z.enum(["device", "peers", "fleet_defaults"]).openapi({ description: "What the values were compared with: the device's own history, its site's peers, or fleet-wide defaults" });

/** One device's (or one set of metrics') anomaly assessment; a null score means there was not enough data. */
export const AnomalyAssessmentSchema = z
  .object({
    score: z.number().min(0).max(1).nullable().openapi({ description: "0.0–1.0; null when there is not enough data to judge" }),
    is_anomaly: z.boolean(),
    basis: BASIS.nullable(),
    baseline_samples: z.number().int(),
    reasons: z.array(AnomalyReasonSchema),
    explanation: z.string(),
    samples_needed: z.number().int().optional().openapi({ description: "With a null score: how many more samples a baseline needs" }),
  })
  .openapi("AnomalyAssessment");

export const DeviceAnomalySchema = z
  .object({
    device_id: z.string(),
    site_id: z.string(),
    score: z.number().min(0).max(1),
    is_anomaly: z.boolean(),
    basis: BASIS,
    reasons: z.array(AnomalyReasonSchema),
    explanation: z.string(),
    detected_at: z.string().openapi({ description: "When the assessed (latest) sample arrived" }),
  })
  .openapi("DeviceAnomaly");
export type DeviceAnomaly = z.infer<typeof DeviceAnomalySchema>;

const TREND_METRIC_NAMES = ["cpu", "memory", "disk"] as const;

export const RiskAssessmentSchema = z
  .object({
    risk_score: z.number().min(0).max(1).nullable().openapi({ description: "0.0–1.0; null when there is not enough data" }),
    risk_level: z.enum(["low", "medium", "high", "critical", "unknown"]),
    factors: z.array(z.object({ name: z.string(), value: z.number(), risk: z.number(), detail: z.string() })),
    trends: z.array(z.object({
      metric: z.enum(TREND_METRIC_NAMES), current: z.number(), threshold: z.number(), slope_per_hour: z.number(), fit_hours: z.number(),
      hours_to_threshold: z.number().nullable(), risk: z.number(),
    })),
    time_to_threshold: z.object({ metric: z.enum(TREND_METRIC_NAMES), hours: z.number(), at: z.string() }).nullable(),
    recommendations: z.array(z.string()),
    data_points: z.number().int(),
    window: z.object({ from: z.string().nullable(), to: z.string().nullable(), hours: z.number() }),
    explanation: z.string(),
    samples_needed: z.number().int().optional(),
  })
  .openapi("RiskAssessment");

export const RecentDeviceEventSchema = z.object({ type: z.string(), at: z.string(), data: z.unknown() }).openapi("RecentDeviceEvent");
export type RecentDeviceEvent = z.infer<typeof RecentDeviceEventSchema>;

/** What the hub knows about one device for the assistant: risk, anomaly and its last events. */
export const DeviceAssessmentSchema = z.object({
  risk: RiskAssessmentSchema,
  anomaly: AnomalyAssessmentSchema.extend({ detected_at: z.string().nullable() }),
  recent_events: z.array(RecentDeviceEventSchema),
});

export const DeviceRiskSummarySchema = z
  .object({
    device_id: z.string(),
    site_id: z.string(),
    risk_score: z.number().min(0).max(1),
    risk_level: z.enum(["low", "medium", "high", "critical", "unknown"]),
    top_factor: z.string().nullable(),
    time_to_threshold: RiskAssessmentSchema.shape.time_to_threshold,
    recommendations: z.array(z.string()),
  })
  .openapi("DeviceRiskSummary");
export type DeviceRiskSummary = z.infer<typeof DeviceRiskSummarySchema>;

/** Metrics a caller sends to be scored (the assistant's analyze). */
export const AiMetricValuesSchema = z.object({
  cpu: z.number().nullable().optional(), memory: z.number().nullable().optional(), disk: z.number().nullable().optional(),
  temperature: z.number().nullable().optional(), latency: z.number().nullable().optional(), error_rate: z.number().nullable().optional(),
});
// ---- device lifecycle -----------------------------------------------------------------------
// A device that leaves a site for good (retired, archived, transferred away, purged): what the
// hub drops besides its live state (presence, agent, cached credential, open commands).

export const DeviceReleaseSchema = z.object({
  reason: z.string(),
  userId: z.number().int().nullable(),
  /** `live`: only the live state; `history`: its metrics and agent history too; `everything`: its commands as well. */
  drop: z.enum(["live", "history", "everything"]),
});
export type DeviceRelease = z.infer<typeof DeviceReleaseSchema>;

export const ReleasedDeviceSchema = z.object({ cancelledCommands: z.array(z.string()) });
export type ReleasedDevice = z.infer<typeof ReleasedDeviceSchema>;
