import { z } from "@hono/zod-openapi";
import { CONFIG_URL_RULE, checkConfigUrls } from "../../lib/config-url";
import { lineText, proseText } from "../../lib/text";
import { DIAGNOSTIC_COMPONENTS, PUSH_ACTIONS } from "../../shared/vocabulary";
import { AgentStateSchema, HealthRecordSchema, LiveMetricsSchema } from "../../shared/hub-contract";
import { AGENT_STATUS_FILTERS, parsePeriod } from "../../services/agents";
import { SiteIdSchema } from "../sites/schema";

export { HealthRecordSchema };

const STATE = AgentStateSchema;

export const AgentListItem = z
  .object({
    device_id: z.string(),
    site_id: z.string(),
    name: z.string(),
    device_type: z.string(),
    device_source: z.enum(["real", "simulated"]),
    status: z.string().openapi({ description: "Device status: online, offline or error" }),
    state: STATE,
    config_version: z.string().nullable(),
    target_version: z.string().nullable().openapi({ description: "The version being installed while an update runs" }),
    health_status: z.enum(["healthy", "unhealthy"]).nullable(),
    last_health_check: HealthRecordSchema.nullable(),
    uptime: z.string().nullable().openapi({ example: "3d 4h 12m" }),
    last_heartbeat: z.string().nullable(),
    state_changed_at: z.string().nullable(),
  })
  .openapi("AgentListItem");

export const AgentList = z.object({ agents: z.array(AgentListItem), total: z.number().int() }).openapi("AgentList");

export const AgentListQuery = z.object({
  site_id: SiteIdSchema.optional(),
  device_type: lineText().min(1).max(64).optional(),
  status: z.enum(AGENT_STATUS_FILTERS).optional().openapi({
    description: "An agent state (idle, downloading, updating, restarting, health_check, ready), a device status (online, offline, error) or a health status (healthy, unhealthy)",
  }),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  offset: z.coerce.number().int().min(0).default(0),
});

export const AgentDetail = z
  .object({
    device_id: z.string(),
    site_id: z.string(),
    name: z.string(),
    device_type: z.string(),
    device_source: z.enum(["real", "simulated"]),
    status: z.string(),
    state: STATE,
    state_since: z.string().nullable(),
    config_version: z.string().nullable(),
    target_version: z.string().nullable(),
    next_transition_at: z.string().nullable().openapi({ description: "When the current lifecycle step ends (simulated agents mid-update)" }),
    last_health_check: HealthRecordSchema,
    uptime: z.string().nullable(),
    uptime_seconds: z.number().int().nullable(),
    version: z.string().nullable().openapi({ description: "Firmware version" }),
    last_heartbeat: z.string().nullable(),
    health_metrics: LiveMetricsSchema.partial().nullable(),
    configuration: z.record(z.string(), z.unknown()).nullable(),
    simulation: z.object({ seed: z.number().int(), failure_rate: z.number(), updates: z.number().int(), boot_count: z.number().int() }).nullable()
      .openapi({ description: "Simulated agents: the per-device seed of the health model and the update failure rate" }),
  })
  .openapi("Agent");

const CONFIG_VERSION = z.string().min(1).max(64).regex(/^[A-Za-z0-9][A-Za-z0-9._+-]*$/, "Letters, digits, '.', '_', '+' and '-' only");
const ACTION_LIST = PUSH_ACTIONS.join(", ");

export const PushBody = z
  .object({
    title: lineText().trim().min(1).max(200).optional(),
    body: proseText().max(4000).optional(),
    data: z.record(z.string(), z.unknown()).optional(),
    message: proseText().trim().min(1).max(2000).optional(),
    priority: z.enum(["low", "normal", "medium", "high", "urgent", "critical"]).optional(),
    action: lineText().min(1).max(32).optional().openapi({ description: `One of ${ACTION_LIST} (case-insensitive)` }),
    config_version: CONFIG_VERSION.optional(),
    config: z.record(z.string(), z.unknown()).optional().openapi({ description: "Settings merged into the agent's configuration when the update completes" }),
    force: z.boolean().optional().openapi({ description: "Replace an update in flight, or reinstall the current version" }),
    backup_data: z.boolean().optional().openapi({ description: "Back up the device's data first" }),
  })
  .strict()
  .superRefine((b, ctx) => {
    if (b.action !== undefined && !(PUSH_ACTIONS as readonly string[]).includes(b.action.toLowerCase())) {
      ctx.addIssue({ code: "custom", path: ["action"], message: `Unknown action; use one of ${ACTION_LIST}` });
    }
    if ([b.title, b.body, b.message, b.action, b.config, b.config_version].every((v) => v === undefined)) {
      ctx.addIssue({ code: "custom", path: [], message: "A push needs title/body, message, action, config or config_version" });
    }
    if (b.config && JSON.stringify(b.config).length > 16_384) ctx.addIssue({ code: "custom", path: ["config"], message: "config is limited to 16 KB" });
    if (b.data && JSON.stringify(b.data).length > 16_384) ctx.addIssue({ code: "custom", path: ["data"], message: "data is limited to 16 KB" });
    checkConfigUrls(b.config, ctx, ["config"]);
    checkConfigUrls(b.data, ctx, ["data"]);
  })
  .openapi("AgentPush", {
    description: "Any of the forms: a notification `{title, body, data}`; `{message, priority, action, config_version}`; a config push `{config}` (its version is derived from the settings when none is given); or `{action, force, backup_data}`. Unknown fields are refused (422). A `config_url` anywhere in `data` or `config` must be " + CONFIG_URL_RULE + ".",
    examples: [
      { title: "Price update", body: "New prices from tomorrow", data: { list: "2026-Q3" } },
      { message: "Install the spring release", priority: "high", action: "update", config_version: "2.1.0" },
      { config: { receipt_printer: "disabled", log_level: "debug" } },
      { action: "restart", force: true, backup_data: true },
    ],
  });

export const PushResponse = z
  .object({
    message: z.string(),
    device_id: z.string(),
    response: z.object({
      status: z.enum(["delivered", "accepted", "in_progress", "up_to_date", "completed"]),
      message: z.string(),
      device_id: z.string(),
      timestamp: z.string(),
      state: STATE.optional().openapi({ description: "Simulated agents: the agent's lifecycle state after the push" }),
      config_version: z.string().optional().openapi({ description: "Simulated agents: the configuration version running after the push" }),
      target_version: z.string().optional(),
      health_check: HealthRecordSchema.optional(),
      result: z.record(z.string(), z.unknown()).optional(),
      command_id: z.string().optional().openapi({ description: "Real devices: the queued command carrying the push" }),
    }),
  })
  .openapi("AgentPushResponse");

export const PeriodQuery = z.object({
  period: z.string().default("24h")
    .refine((p) => parsePeriod(p) !== undefined, "A period like 24h, 1d or 7d (1 hour to 90 days)")
    .openapi({ description: "Window ending now: 24h, 1d, 7d (1h–2160h or 1d–90d). Buckets: 1 h up to 2 days, 6 h up to 14 days, else 1 day.", example: "24h" }),
});

const SeriesHead = {
  device_id: z.string(),
  device_source: z.enum(["real", "simulated"]),
  period: z.string(),
  from: z.string(),
  to: z.string(),
  bucket_seconds: z.number().int(),
};

const num = z.number().nullable();

export const MetricsSeries = z
  .object({
    ...SeriesHead,
    samples: z.number().int(),
    series: z.array(z.object({
      timestamp: z.string(),
      samples: z.number().int(),
      cpu_usage_avg: num, cpu_usage_max: num,
      memory_usage_avg: num, memory_usage_max: num,
      disk_usage_avg: num, disk_usage_max: num,
      temperature_avg: num,
      network_latency_ms_avg: num, network_latency_ms_max: num,
      error_rate_avg: num,
    })),
  })
  .openapi("AgentMetricsSeries");

export const TransactionsSeries = z
  .object({
    ...SeriesHead,
    total: z.number().int(),
    transactions_today: z.number().int().nullable(),
    series: z.array(z.object({ timestamp: z.string(), transactions: z.number().int() })),
  })
  .openapi("AgentTransactionsSeries");

export const ErrorsSeries = z
  .object({
    ...SeriesHead,
    total_errors: z.number().int(),
    series: z.array(z.object({ timestamp: z.string(), errors: z.number().int(), error_rate_avg: num })),
    recent: z.array(z.object({ timestamp: z.string(), kind: z.string(), level: z.string(), message: z.string(), data: z.unknown() })),
  })
  .openapi("AgentErrorsSeries");

// ---- restart and device health ----------------------------------------------------------------

export const RestartBody = z
  .object({ reason: proseText().trim().min(1).max(500).optional() })
  .openapi("RestartRequest");

export const RestartResponse = z
  .object({
    message: z.string(),
    device_id: z.string(),
    response: z.object({
      status: z.enum(["success", "queued"]),
      message: z.string(),
      device_id: z.string(),
      health_check: HealthRecordSchema,
      reboot_time_seconds: z.number().optional(),
      previous_status: z.enum(["healthy", "unhealthy"]).optional(),
      command_id: z.string().optional().openapi({ description: "Real devices: the queued restart command" }),
    }),
  })
  .openapi("RestartResponse");

export const DeviceHealthResponse = z
  .object({
    device_id: z.string(),
    health: HealthRecordSchema,
    agent_state: STATE,
    last_updated: z.string(),
  })
  .openapi("DeviceHealth");

export const DiagnosticsBody = z
  .object({
    force_check: z.boolean().optional(),
    diagnostic_mode: z.enum(["quick", "standard", "comprehensive"]).optional(),
    include_logs: z.boolean().optional(),
    test_components: z.array(z.enum(DIAGNOSTIC_COMPONENTS)).max(4).optional()
      .openapi({ description: "Default: all of payment, printer, display, network" }),
  })
  .openapi("DiagnosticsRequest");

const DIAGNOSTIC = z.object({
  status: z.enum(["pass", "warn", "fail", "unknown"]),
  detail: z.string(),
  duration_ms: z.number().int().optional(),
});

export const DiagnosticsResponse = z
  .object({
    device_id: z.string(),
    health: HealthRecordSchema,
    agent_state: STATE,
    diagnostic_mode: z.string(),
    diagnostics: z.record(z.string(), DIAGNOSTIC),
    logs: z.array(z.object({ timestamp: z.string(), kind: z.string(), level: z.string(), message: z.string(), data: z.unknown() })).optional(),
    timestamp: z.string(),
  })
  .openapi("DiagnosticsResult");
