import { z } from "@hono/zod-openapi";
import { CONFIG_URL_RULE, ConfigUrlSchema } from "../../lib/config-url";
import { lineText, proseText } from "../../lib/text";
import { DEFAULT_JOB_DEADLINE_S as DEFAULT_DEADLINE_S } from "../../shared/vocabulary";
import { JobCountsSchema } from "../../shared/hub-contract";
import { DeviceIdSchema } from "../devices/schema";
import { SiteIdSchema, SiteParams } from "../sites/schema";
import type { ExecutionRow, JobRow } from "../../services/jobs";
import { countExecutions } from "../../services/jobs";

export const JOB_STATUSES = ["queued", "sent", "completed", "failed", "cancelled", "timeout"] as const;

export const JobParams = z.object({
  job_id: z.string().min(1).max(64).regex(/^[A-Za-z0-9_-]+$/).openapi({ param: { name: "job_id", in: "path" }, example: "job-3f9a1c0b7d2e" }),
});
export { SiteParams };

export const CreateJobBody = z
  .object({
    action: lineText().trim().min(1).max(100).openapi({
      description: "What to do; it becomes each target's command type (REBOOT → restart, UPDATE_CONFIG → update_config, other text lower-cased with `_`)",
      example: "update_config",
    }),
    description: proseText().max(2000).optional(),
    priority: z.enum(["high", "medium", "low"]).default("medium"),
    target_device_ids: z.array(DeviceIdSchema).min(1).max(1000).optional()
      .openapi({ description: "Only these devices of the site (each must belong to it, else 422)" }),
    device_type: lineText().min(1).max(64).optional().openapi({ description: "Only devices of this type (case-insensitive); with target_device_ids, those of the list that match" }),
    config_url: ConfigUrlSchema.optional().openapi({ description: `Where devices fetch the details: ${CONFIG_URL_RULE}. Default: the job's own path on this service`, example: "https://config.example.com/pos/2026-07.json" }),
    config_version: lineText().min(1).max(64).optional().openapi({ description: "Default: derived from the start time, e.g. 2026.11.22-172045" }),
    deadline_s: z.number().int().min(10).max(172_800).optional()
      .openapi({ description: `Seconds from creation until the job times out (default ${DEFAULT_DEADLINE_S})` }),
  })
  .openapi("CreateJobRequest");

export const JobIdempotencyHeaders = z.object({
  "idempotency-key": lineText().min(1).max(255).optional().openapi({
    param: { name: "idempotency-key", in: "header" },
    description: "Makes retries safe: a repeat with the same key on the same site and the same body answers the job it created; with a different body, 422",
    example: "5f0c6a3e-2b1d-4c8e-9a77-0d3f1e2a4b6c",
  }),
});

export const JobCreatedHeaders = z.object({
  "Idempotent-Replayed": z.literal("true").optional().openapi({ description: "Present when the answer repeats an earlier request with the same Idempotency-Key" }),
});

export const CreateJobResponse = z
  .object({ message: z.string(), job_id: z.string(), site_id: z.string(), action: z.string(), status: z.literal("queued") })
  .openapi("CreateJobResponse");

export const JobSchema = z
  .object({
    job_id: z.string(),
    site_id: z.string(),
    action: z.string(),
    description: z.string().nullable(),
    priority: z.enum(["high", "medium", "low"]),
    status: z.enum(JOB_STATUSES),
    segment: z.string().nullable().openapi({ description: "Set when the job is sent: the targeted device group, e.g. pos-terminals" }),
    config_url: z.string().nullable(),
    config_version: z.string().nullable(),
    created_by: z.string().nullable(),
    created_at: z.string(),
    started_at: z.string().nullable(),
    completed_at: z.string().nullable(),
    result: z.unknown().openapi({ description: "Null until the job ends; then {total, succeeded, failed, pending} (and a message when nothing matched)" }),
    error_message: z.string().nullable(),
    target_device_ids: z.array(z.string()).nullable(),
    device_type: z.string().nullable(),
    deadline_at: z.string().nullable(),
    updated_at: z.string(),
  })
  .openapi("Job");

export const ExecutionSchema = z
  .object({
    device_id: z.string(),
    command_id: z.string().nullable(),
    status: z.string().openapi({ description: "The state of the device's command: pending, delivered, acknowledged, completed, failed, expired or cancelled; `skipped` (never sent) when the device's owner has not granted a permission the command needs, with the reason in error_message" }),
    result: z.unknown(),
    error_message: z.string().nullable(),
    created_at: z.string(),
    completed_at: z.string().nullable(),
  })
  .openapi("JobExecution");

/** Counted by the one rule in src/shared/vocabulary.ts (`countTargets`), the same the hub finishes jobs by. */
export { JobCountsSchema };

export const JobDetail = JobSchema.extend({ counts: JobCountsSchema, executions: z.array(ExecutionSchema) }).openapi("JobDetail");

export const JobListQuery = z.object({
  site_id: SiteIdSchema.optional(),
  status: z.enum(JOB_STATUSES).optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  offset: z.coerce.number().int().min(0).default(0),
});

export const JobList = z
  .object({ jobs: z.array(JobSchema), total: z.number().int(), limit: z.number().int(), offset: z.number().int() })
  .openapi("JobList");

export const toJob = (j: JobRow) => ({
  job_id: j.jobId,
  site_id: j.siteId,
  action: j.action,
  description: j.description,
  priority: j.priority,
  status: j.status,
  segment: j.segment,
  config_url: j.configUrl,
  config_version: j.configVersion,
  created_by: j.createdBy,
  created_at: j.createdAt,
  started_at: j.startedAt,
  completed_at: j.completedAt,
  result: j.result ?? null,
  error_message: j.errorMessage,
  target_device_ids: (j.targetDeviceIds as string[] | null) ?? null,
  device_type: j.deviceType,
  deadline_at: j.deadlineAt,
  updated_at: j.updatedAt,
});

export const toJobDetail = (j: JobRow, executions: ExecutionRow[]) => ({
  ...toJob(j),
  counts: countExecutions(executions),
  executions: executions.map((e) => ({
    device_id: e.deviceId,
    command_id: e.commandId,
    status: e.status,
    result: e.result ?? null,
    error_message: e.errorMessage,
    created_at: e.createdAt,
    completed_at: e.completedAt,
  })),
});
