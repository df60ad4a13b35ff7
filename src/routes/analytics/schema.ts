import { z } from "@hono/zod-openapi";
import { ACTIVITY_TYPES, JOB_OUTCOME_STATUSES } from "../../services/analytics";
import { ERROR_CATEGORIES, ERROR_SEVERITIES, RESOLUTION_STATUSES } from "../../services/analytics-errors";

export const EXTRA_DATA_MAX_BYTES = 8 * 1024;
const utf8Bytes = (value: unknown) => new TextEncoder().encode(JSON.stringify(value)).byteLength;

/** A free-form object of at most 8 KB as JSON. */
const smallObject = (description: string) =>
  z.record(z.string(), z.unknown())
    .refine((value) => utf8Bytes(value) <= EXTRA_DATA_MAX_BYTES, { message: "At most 8 KB as JSON" })
    .openapi({ description: `${description} (an object, at most 8 KB as JSON)` });

/** A state name as devices and people write it: online, offline, error, maintenance, suspended… */
const StateName = z.string().min(1).max(32).regex(/^[A-Za-z][A-Za-z0-9_-]*$/, "A word of letters, digits, _ or -")
  .openapi({ description: "A state name (letters, digits, _ or -; stored lower-case), e.g. online, offline, error, maintenance", example: "offline" });

export const UserActivityBody = z
  .strictObject({
    activity_type: z.enum(ACTIVITY_TYPES),
    page_url: z.string().max(2048).nullish(),
    element_id: z.string().max(256).nullish(),
    search_query: z.string().max(1000).nullish(),
    session_id: z.string().max(128).nullish(),
    duration_ms: z.number().int().min(0).max(86_400_000).nullish().openapi({ description: "How long the activity lasted, up to a day" }),
    extra_data: smallObject("Anything else the client wants kept").nullish(),
  })
  .openapi("UserActivity");

export const UserActivityRecorded = z
  .object({ message: z.string(), activity_id: z.number().int() })
  .openapi("UserActivityRecorded");

export const ErrorReportBody = z
  .strictObject({
    category: z.enum(ERROR_CATEGORIES),
    severity: z.enum(ERROR_SEVERITIES).default("error"),
    error_message: z.string().min(1).max(4000),
    stack_trace: z.string().max(16_000).nullish(),
    context: smallObject("Where it happened: route, component, browser…").nullish(),
    session_id: z.string().max(128).nullish().openapi({ description: "The browser session; with the client address, what the rate limit counts by" }),
  })
  .openapi("ErrorReport");

export const ErrorReportRecorded = z
  .object({
    message: z.string(),
    error_id: z.number().int(),
    occurrences: z.number().int().openapi({ description: "Reports of this error the row now counts" }),
    folded: z.boolean().openapi({ description: "True when the report was counted in an existing row (same category, message and first stack frame, first seen less than 5 minutes ago)" }),
  })
  .openapi("ErrorReportRecorded");

export const ErrorRecord = z
  .object({
    id: z.number().int(),
    category: z.string(),
    severity: z.string(),
    error_message: z.string(),
    stack_trace: z.string().nullable(),
    context: z.record(z.string(), z.unknown()).nullable(),
    resolution_status: z.enum(RESOLUTION_STATUSES),
    occurrences: z.number().int(),
    first_seen_at: z.string(),
    last_seen_at: z.string(),
    user_id: z.number().int().nullable(),
    session_id: z.string().nullable(),
    request_id: z.string().nullable(),
    resolved_at: z.string().nullable(),
    resolved_by: z.number().int().nullable(),
  })
  .openapi("ErrorRecord");

export const ErrorPage = z
  .object({ errors: z.array(ErrorRecord), total: z.number().int(), limit: z.number().int(), offset: z.number().int() })
  .openapi("ErrorPage");

export const ErrorListQuery = z.object({
  resolution_status: z.enum(RESOLUTION_STATUSES).optional(),
  category: z.enum(ERROR_CATEGORIES).optional(),
  severity: z.enum(ERROR_SEVERITIES).optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  offset: z.coerce.number().int().min(0).default(0),
});

export const ErrorParams = z.object({
  error_id: z.string().regex(/^[1-9]\d{0,14}$/, "A positive integer").openapi({ param: { name: "error_id", in: "path" }, example: "42" }),
});

export const ResolutionBody = z
  .strictObject({ resolution_status: z.enum(RESOLUTION_STATUSES) })
  .openapi("ErrorResolution");

export const DeviceStateChangeBody = z
  .strictObject({
    device_id: z.string().min(1).max(128),
    previous_state: StateName.nullish(),
    new_state: StateName,
    changed_by: z.enum(["user", "system"]).nullish().openapi({ description: "Derived from the caller (an operator: user; the device: system); when sent, it must agree" }),
    reason: z.string().max(500).nullish(),
    extra_data: smallObject("Anything else about the change").nullish(),
  })
  .openapi("DeviceStateChange");

export const DeviceStateChangeRecorded = z
  .object({
    message: z.string(),
    history_id: z.number().int(),
    device_id: z.string(),
    changed_by: z.enum(["user", "system"]),
    timestamp: z.string(),
  })
  .openapi("DeviceStateChangeRecorded");

export const JobOutcomeBody = z
  .strictObject({
    job_id: z.string().min(1).max(128),
    job_type: z.string().min(1).max(64).nullish().openapi({ description: "Defaults to the job's action" }),
    device_id: z.string().min(1).max(128).nullish().openapi({ description: "The device whose execution this is; without it, the outcome of the whole job. A device reporting may only name itself (the default)." }),
    status: z.enum(JOB_OUTCOME_STATUSES),
    duration_ms: z.number().int().min(0).max(30 * 86_400_000).nullish(),
    initiated_by: z.string().max(128).nullish(),
    error_code: z.string().max(64).nullish(),
    retry_count: z.number().int().min(0).max(1000).nullish(),
    metadata: smallObject("Anything else about the outcome").nullish(),
  })
  .openapi("JobOutcome");

export const JobOutcomeRecorded = z
  .object({
    message: z.string(),
    outcome_id: z.number().int(),
    job_id: z.string(),
    scope: z.enum(["job", "execution"]),
  })
  .openapi("JobOutcomeRecorded");
