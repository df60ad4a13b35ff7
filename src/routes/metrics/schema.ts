import { z } from "@hono/zod-openapi";
import { JOB_OUTCOME_STATUSES } from "../../services/analytics";
import { ERROR_CATEGORIES, ERROR_SEVERITIES } from "../../services/analytics-errors";
import { DeviceParams } from "../devices/schema";

export { DeviceParams };

const hours = (max: number, fallback: number) =>
  z.coerce.number().int().min(1).max(max).default(fallback)
    .openapi({ description: `Hours back from now, 1–${max} (default ${fallback})`, example: fallback });

const WINDOW = "The window starts on the hour: `hours` whole hours before the current hour, plus the current hour so far (`since`, `until`).";

const windowFields = {
  hours: z.number().int(),
  since: z.string().openapi({ description: "Start of the window (on the hour)" }),
  until: z.string().openapi({ description: "End of the window (now)" }),
};

const ms = (description: string) => z.number().nullable().openapi({ description: `${description}, ms (null without requests)` });

export const ApiPerformanceQuery = z.object({
  hours: hours(168, 24),
  endpoint: z.string().min(1).max(256).optional().openapi({ description: "Only this route template, e.g. `/api/v1/devices/{device_id}` (as listed in `endpoints`)" }),
});

const RequestStats = z.object({
  request_count: z.number().int(),
  error_count: z.number().int().openapi({ description: "4xx and 5xx answers" }),
  client_error_count: z.number().int().openapi({ description: "4xx answers" }),
  server_error_count: z.number().int().openapi({ description: "5xx answers" }),
  error_rate: z.number().openapi({ description: "error_count / request_count (0 without requests)" }),
  client_error_rate: z.number(),
  server_error_rate: z.number(),
  avg_response_time_ms: ms("Average response time"),
  min_response_time_ms: ms("Fastest response"),
  max_response_time_ms: ms("Slowest response"),
  p50_response_time_ms: ms("Median response time (within 5 %)"),
  p95_response_time_ms: ms("95th percentile (within 5 %)"),
  p99_response_time_ms: ms("99th percentile (within 5 %)"),
}).openapi("RequestStats");

export const ApiPerformance = z
  .object({
    ...windowFields,
    endpoint: z.string().nullable(),
    totals: RequestStats,
    endpoints: z.array(RequestStats.extend({
      endpoint: z.string().openapi({ description: "The route template (never a raw path)" }),
      method: z.string(),
    })).openapi({ description: "Per route template and method, busiest first" }),
  })
  .openapi("ApiPerformance", { description: WINDOW });

export const JobOutcomesQuery = z.object({
  hours: hours(168, 24),
  job_type: z.string().min(1).max(64).optional().openapi({ description: "Only this job type (a job's action)" }),
  site_id: z.string().min(1).max(64).optional().openapi({ description: "Only this site (viewer role needed); by default every site the caller can see" }),
});

const OutcomeStats = z.object({
  total: z.number().int(),
  by_status: z.object(Object.fromEntries(JOB_OUTCOME_STATUSES.map((status) => [status, z.number().int()]))),
  success_rate: z.number().nullable().openapi({ description: "completed / total (null when none)" }),
  avg_duration_ms: z.number().nullable(),
  p95_duration_ms: z.number().nullable().openapi({ description: "Within 5 %" }),
}).openapi("JobOutcomeStats");

const JobScopes = z.object({
  jobs: OutcomeStats.openapi({ description: "How jobs ended (one per job)" }),
  executions: OutcomeStats.openapi({ description: "How devices' executions of them ended (one per device and job)" }),
});

export const JobOutcomeMetrics = z
  .object({
    ...windowFields,
    job_type: z.string().nullable(),
    job_types: z.array(JobScopes.extend({ job_type: z.string() })),
    totals: JobScopes,
  })
  .openapi("JobOutcomeMetrics", { description: WINDOW });

export const ErrorTrendsQuery = z.object({
  hours: hours(168, 24),
  category: z.enum(ERROR_CATEGORIES).optional(),
});

const bySeverity = z.object(Object.fromEntries(ERROR_SEVERITIES.map((severity) => [severity, z.number().int()])));

export const ErrorTrends = z
  .object({
    ...windowFields,
    category: z.string().nullable(),
    total: z.number().int().openapi({ description: "Error occurrences (a folded row counts each report)" }),
    by_category: z.object(Object.fromEntries(ERROR_CATEGORIES.map((category) => [category, z.number().int()]))),
    by_severity: bySeverity,
    by_category_and_severity: z.array(z.object({ category: z.string(), severity: z.string(), count: z.number().int() })),
    hourly: z.array(z.object({ hour: z.string(), count: z.number().int(), by_severity: bySeverity })).openapi({ description: "Every hour of the window, oldest first" }),
  })
  .openapi("ErrorTrends", { description: WINDOW });

export const StateHistoryQuery = z.object({
  hours: hours(720, 24),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  offset: z.coerce.number().int().min(0).default(0),
});

export const DeviceStateHistory = z
  .object({
    device_id: z.string(),
    site_id: z.string(),
    hours: z.number().int(),
    since: z.string(),
    until: z.string(),
    total: z.number().int(),
    limit: z.number().int(),
    offset: z.number().int(),
    history: z.array(z.object({
      id: z.number().int(),
      timestamp: z.string(),
      previous_state: z.string().nullable(),
      new_state: z.string(),
      changed_by: z.string().openapi({ description: "user (an operator) or system (presence, the device itself)" }),
      user_id: z.number().int().nullable().openapi({ description: "The operator, when one made the change" }),
      source: z.enum(["presence", "lifecycle", "reported"]).openapi({ description: "presence: heartbeats and their absence; lifecycle: suspend/resume; reported: POST /api/v1/analytics/device-state-change" }),
      reason: z.string().nullable(),
      extra_data: z.record(z.string(), z.unknown()).nullable(),
    })).openapi({ description: "Newest first" }),
  })
  .openapi("DeviceStateHistory");
