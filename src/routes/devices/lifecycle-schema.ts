import { z } from "@hono/zod-openapi";
import { lineText } from "../../lib/text";
import { LIFECYCLE_ACTIONS, LIFECYCLE_STATES } from "../../shared/device-lifecycle";
import { LIVE_STATUSES } from "../../shared/vocabulary";
import { SiteIdSchema } from "../sites/schema";
import { CreateDeviceBody, DeviceListItem } from "./schema";

export const LifecycleIdempotencyHeaders = z.object({
  "idempotency-key": lineText().min(1).max(255).optional().openapi({
    param: { name: "idempotency-key", in: "header" },
    description: "Makes a retry safe: the same key from the same user with the same request answers what the first did (without a one-time api_key) and acts no more; with another request, 422",
    example: "5f0c6a3e-2b1d-4c8e-9a77-0d3f1e2a4b6c",
  }),
});

const REASON = lineText().trim().min(1).max(500);

export const ReasonBody = z.object({ reason: REASON.optional().openapi({ description: "Why; kept in the audit event and the device's state history" }) })
  .openapi("LifecycleReason");

export const TransferBody = z
  .object({
    target_site_id: SiteIdSchema.openapi({ description: "The site the device moves to; the caller must be an operator there too" }),
    reason: REASON.openapi({ description: "Why it moves; kept in both sites' audit trails" }),
  })
  .openapi("TransferDeviceRequest");

export const DeleteDeviceQuery = z.object({
  mode: z.enum(["archive", "purge"]).openapi({ description: "archive: kept read-only, key revoked; purge: its rows and its hub state are removed" }),
  confirm: z.literal("true", { error: "Deleting a device needs confirm=true" }).openapi({ description: "Must be `true`" }),
  reason: REASON.optional(),
});

export const LifecycleChangeSchema = z
  .object({
    action: z.enum(LIFECYCLE_ACTIONS),
    device_id: z.string(),
    site_id: z.string().openapi({ description: "The device's site after the action" }),
    previous_site_id: z.string().nullable().openapi({ description: "Transfers: the site it left" }),
    lifecycle_state: z.enum([...LIFECYCLE_STATES, "purged"]),
    epoch_id: z.string().nullable().openapi({ description: "The lifecycle epoch a transfer or re-enrolment started" }),
    cancelled_commands: z.array(z.string()).openapi({ description: "Open commands of the device cancelled by this action (with its reason)" }),
    reason: z.string().nullable(),
    at: z.string(),
    api_key: z.string().optional().openapi({ description: "Transfer and re-enrolment of a real device: its new key, shown once (never in a replayed answer)" }),
  })
  .openapi("DeviceLifecycleChange");

export const CreateDeviceWithSiteBody = CreateDeviceBody.extend({ site_id: SiteIdSchema }).openapi("CreateDeviceWithSiteRequest");

export const HistoryQuery = z.object({
  limit: z.coerce.number().int().min(1).max(500).default(50),
  offset: z.coerce.number().int().min(0).default(0),
});

const page = { total: z.number().int(), limit: z.number().int(), offset: z.number().int() };

export const DeviceAuditPage = z
  .object({
    device_id: z.string(),
    events: z.array(z.object({
      id: z.number().int(),
      event_type: z.string(),
      category: z.string(),
      severity: z.string(),
      description: z.string().nullable(),
      user_id: z.number().int().nullable(),
      job_id: z.string().nullable(),
      site_id: z.string().nullable(),
      event_metadata: z.record(z.string(), z.unknown()),
      ip_address: z.string().nullable(),
      created_at: z.string(),
    })),
    ...page,
  })
  .openapi("DeviceAuditPage");

export const DeviceJobPage = z
  .object({
    device_id: z.string(),
    jobs: z.array(z.object({
      job_id: z.string(),
      site_id: z.string(),
      action: z.string(),
      priority: z.string(),
      job_status: z.string().openapi({ description: "The job as a whole" }),
      execution_status: z.string().openapi({ description: "This device's part of it" }),
      command_id: z.string().nullable(),
      result: z.unknown().nullable(),
      error_message: z.string().nullable(),
      created_at: z.string(),
      completed_at: z.string().nullable(),
    })),
    ...page,
  })
  .openapi("DeviceJobPage");

export const DeviceErrorPage = z
  .object({
    device_id: z.string(),
    errors: z.array(z.object({
      id: z.number().int(),
      category: z.string(),
      severity: z.string(),
      error_message: z.string(),
      context: z.record(z.string(), z.unknown()).nullable(),
      resolution_status: z.string(),
      occurrences: z.number().int(),
      first_seen_at: z.string(),
      last_seen_at: z.string(),
    })),
    ...page,
  })
  .openapi("DeviceErrorPage");

const counts = {
  total_devices: z.number().int(),
  by_status: z.object(Object.fromEntries(LIVE_STATUSES.map((s) => [s, z.number().int()]))).catchall(z.number().int())
    .openapi({ description: "Devices by their last known status" }),
  by_lifecycle_state: z.object(Object.fromEntries(LIFECYCLE_STATES.map((s) => [s, z.number().int()]))).catchall(z.number().int()),
};

const SiteHeader = {
  site_id: z.string(),
  name: z.string(),
  description: z.string().nullable(),
  location: z.string().nullable(),
  is_active: z.boolean(),
  created_at: z.string(),
  updated_at: z.string(),
};

export const SiteDeviceSummary = z.object({ ...SiteHeader, ...counts }).openapi("SiteDeviceSummary");

export const SiteDeviceSummaryPage = z.object({ sites: z.array(SiteDeviceSummary), ...page }).openapi("SiteDeviceSummaryPage");

export const SiteWithDevices = z.object({ ...SiteHeader, ...counts, devices: z.array(DeviceListItem) }).openapi("SiteWithDevices");

export const SitePageQuery = z.object({
  limit: z.coerce.number().int().min(1).max(500).default(100),
  offset: z.coerce.number().int().min(0).default(0),
});
