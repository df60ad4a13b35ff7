import { z } from "@hono/zod-openapi";
import { CONFIG_URL_RULE, ConfigUrlSchema } from "../../lib/config-url";
import { lineText } from "../../lib/text";
import { SiteIdSchema } from "../sites/schema";
import { ROLLOUT_STATUSES, RolloutProgressSchema } from "../../shared/rollout-contract";
import { ROLLOUT_DEFAULTS } from "../../shared/rollout-plan";
import type { RolloutRow } from "../../services/rollouts";
import type { RolloutProgress } from "../../shared/rollout-contract";

const LOCAL_TIME = z.string().regex(/^([01]\d|2[0-3]):[0-5]\d$/, "A local time HH:MM (24 h)");
const Payload = z
  .object({
    config_url: ConfigUrlSchema.optional().openapi({ description: `For update_config: where devices fetch the configuration, ${CONFIG_URL_RULE}` }),
    config_version: lineText().min(1).max(64).optional().openapi({ description: "For update_config: the version devices move to (and the one config_version_not compares with)" }),
  })
  .catchall(z.unknown())
  .openapi({ description: "The command's payload: config_url and config_version become the job's; any other field is passed to each device's command as is" });

export const RolloutParams = z.object({
  rollout_id: z.string().min(1).max(64).regex(/^[A-Za-z0-9_-]+$/).openapi({ param: { name: "rollout_id", in: "path" }, example: "rol-3f9a1c0b7d2e" }),
});

export const GeneratedWaves = z
  .object({
    canary_percent: z.number().gt(0).max(100).default(ROLLOUT_DEFAULTS.canaryPercent)
      .openapi({ description: `The first wave's share of the targeted devices, at least one device (default ${ROLLOUT_DEFAULTS.canaryPercent})` }),
    growth: z.number().min(1).max(10).default(ROLLOUT_DEFAULTS.growth).openapi({ description: `Each next wave is this many times the one before (default ${ROLLOUT_DEFAULTS.growth})` }),
    soak_seconds: z.number().int().min(0).max(604_800).default(ROLLOUT_DEFAULTS.soakSeconds)
      .openapi({ description: `How long a finished wave is watched before the next one starts (default ${ROLLOUT_DEFAULTS.soakSeconds}); promote skips it` }),
  })
  .openapi("GeneratedWaves");

export const ExplicitWave = z
  .object({
    site_ids: z.array(SiteIdSchema).min(1).max(500).optional().openapi({ description: "The targeted devices of these sites (each must be one of the rollout's)" }),
    percent: z.number().gt(0).max(100).optional().openapi({ description: "The next this-many percent of the targeted devices, in site order" }),
  })
  .refine((w) => (w.site_ids === undefined) !== (w.percent === undefined), { message: "Give exactly one of site_ids or percent" })
  .openapi("ExplicitWave");

export const CreateRolloutBody = z
  .object({
    name: lineText().trim().min(1).max(200),
    site_ids: z.array(SiteIdSchema).min(1).max(500).optional().openapi({ description: "Target these sites (operator role on every one is required)" }),
    tenant_id: lineText().min(1).max(64).optional().openapi({ description: "Target every active site of this tenant (tenant owner role required)" }),
    device_filter: z.object({
      device_type: lineText().min(1).max(64).optional().openapi({ description: "Only devices of this type (case-insensitive)" }),
      segment: lineText().min(1).max(64).optional().openapi({ description: "Only devices of this segment, as jobs name it: the plural of the device type, e.g. pos-terminals" }),
      config_version_not: lineText().min(1).max(64).optional().openapi({ description: "Only devices whose current config version (as their agent last reported) differs from this; devices that never reported one are included" }),
    }).optional(),
    action: lineText().trim().min(1).max(100).openapi({ description: "The command each device gets (update_config, restart, or any command type), as a job's action", example: "update_config" }),
    payload: Payload.optional(),
    waves: z.union([GeneratedWaves, z.array(ExplicitWave).min(1).max(50)]).optional()
      .openapi({ description: `Generated (default: a canary of ${ROLLOUT_DEFAULTS.canaryPercent} %, then ×${ROLLOUT_DEFAULTS.growth} each wave, ${ROLLOUT_DEFAULTS.soakSeconds} s soak), or an explicit list; devices an explicit list leaves out form one last wave. Explicit waves soak ${ROLLOUT_DEFAULTS.soakSeconds} s.` }),
    abort: z.object({
      max_failure_rate: z.number().min(0).max(1).default(ROLLOUT_DEFAULTS.maxFailureRate)
        .openapi({ description: `Abort when more than this share of the current wave's finished executions failed (default ${ROLLOUT_DEFAULTS.maxFailureRate})` }),
      min_executions: z.number().int().min(1).max(100_000).default(ROLLOUT_DEFAULTS.minExecutions)
        .openapi({ description: `The rate is judged only once the wave has this many finished executions (default ${ROLLOUT_DEFAULTS.minExecutions})` }),
      max_failures: z.number().int().min(1).max(100_000).nullable().default(null).openapi({ description: "Abort once this many executions failed in the whole rollout (default: no limit)" }),
      offline_counts_as_failure: z.boolean().default(ROLLOUT_DEFAULTS.offlineCountsAsFailure)
        .openapi({ description: "A device still offline when its recovery time is up counts as failed (default true); otherwise it is released from the budget as succeeded" }),
    }).default({ max_failure_rate: ROLLOUT_DEFAULTS.maxFailureRate, min_executions: ROLLOUT_DEFAULTS.minExecutions, max_failures: null, offline_counts_as_failure: ROLLOUT_DEFAULTS.offlineCountsAsFailure }),
    budget: z.object({
      max_devices_per_site: z.number().int().min(1).max(10_000).optional()
        .openapi({ description: `At most this many devices of a site executing or recovering at once (default ${ROLLOUT_DEFAULTS.maxDevicesPerSite})` }),
      max_percent_per_site: z.number().gt(0).max(100).optional().openapi({ description: "Instead: at most this share of the site's active devices (at least one)" }),
      recovery_timeout_s: z.number().int().min(10).max(86_400).default(ROLLOUT_DEFAULTS.recoveryTimeoutS)
        .openapi({ description: `A changed device must be back online and healthy within this many seconds (default ${ROLLOUT_DEFAULTS.recoveryTimeoutS}), else it failed` }),
    }).refine((b) => b.max_devices_per_site === undefined || b.max_percent_per_site === undefined, { message: "Give at most one of max_devices_per_site or max_percent_per_site" })
      .optional(),
    window: z.object({
      start_local: LOCAL_TIME.openapi({ example: "02:00" }),
      end_local: LOCAL_TIME.openapi({ example: "05:00" }),
    }).optional().openapi({ description: "Devices start only between these times of each site's own time zone (an end before the start spans midnight); by default at any time" }),
    rollback: z.object({ action: lineText().trim().min(1).max(100), payload: Payload.optional() }).optional()
      .openapi({ description: "On abort, queued for every device the rollout already changed (default: none)" }),
  })
  .refine((b) => (b.site_ids === undefined) !== (b.tenant_id === undefined), { message: "Give exactly one of site_ids or tenant_id", path: ["site_ids"] })
  .openapi("CreateRolloutRequest");
export type CreateRolloutInput = z.infer<typeof CreateRolloutBody>;

export const RolloutIdempotencyHeaders = z.object({
  "idempotency-key": lineText().min(1).max(255).optional().openapi({
    param: { name: "idempotency-key", in: "header" },
    description: "Makes retries safe: a repeat by the same user with the same key and body answers the rollout it created; with a different body, 422",
  }),
});

export const RolloutCreatedHeaders = z.object({
  "Idempotent-Replayed": z.literal("true").optional().openapi({ description: "Present when the answer repeats an earlier request with the same Idempotency-Key" }),
});

export const RolloutSchema = z
  .object({
    rollout_id: z.string(),
    name: z.string(),
    status: z.enum(ROLLOUT_STATUSES).openapi({ description: "scheduled → running → completed | aborted, and paused in between" }),
    tenant_id: z.string().nullable(),
    site_ids: z.array(z.string()),
    action: z.string(),
    current_wave: z.number().int(),
    total_devices: z.number().int(),
    abort_reason: z.string().nullable(),
    settings: z.record(z.string(), z.unknown()).openapi({ description: "The request with every default filled in" }),
    created_by: z.number().int(),
    created_at: z.string(),
    updated_at: z.string(),
    finished_at: z.string().nullable(),
  })
  .openapi("Rollout");

export const RolloutDetail = RolloutSchema.extend({
  progress: RolloutProgressSchema.nullable().openapi({ description: "Live figures from the rollout's orchestrator, per wave and per site (null only if it has not received its plan yet)" }),
}).openapi("RolloutDetail");

export const RolloutListQuery = z.object({
  status: z.enum(ROLLOUT_STATUSES).optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  offset: z.coerce.number().int().min(0).default(0),
});

export const RolloutList = z
  .object({ rollouts: z.array(RolloutSchema), total: z.number().int(), limit: z.number().int(), offset: z.number().int() })
  .openapi("RolloutList");

export const toRollout = (row: RolloutRow) => ({
  rollout_id: row.rolloutId,
  name: row.name,
  status: row.status,
  tenant_id: row.tenantId,
  site_ids: row.siteIds as string[],
  action: row.action,
  current_wave: row.currentWave,
  total_devices: row.totalDevices,
  abort_reason: row.abortReason,
  settings: row.spec as Record<string, unknown>,
  created_by: row.createdBy,
  created_at: row.createdAt,
  updated_at: row.updatedAt,
  finished_at: row.finishedAt,
});

export const toRolloutDetail = (row: RolloutRow, progress: RolloutProgress | null) => ({
  ...toRollout(row),
  ...(progress ? { status: progress.status, current_wave: progress.current_wave, abort_reason: progress.abort_reason, finished_at: progress.finished_at } : {}),
  progress,
});
