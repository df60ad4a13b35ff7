import { ProvisionResponse } from "../devices/schema";
import { z } from "@hono/zod-openapi";
import { lineText } from "../../lib/text";
import { SiteParams } from "../sites/schema";
import { DEFAULT_EXPIRES_IN_HOURS, INTENT_STATUSES, MAX_EXPIRES_IN_HOURS, toIntentView, type IntentRow } from "../../services/intents";

const IntentIdSchema = lineText().min(1).max(64);

export { SiteParams };

export const IntentParams = SiteParams.extend({
  intent_id: IntentIdSchema.openapi({ param: { name: "intent_id", in: "path" }, example: "3f1c2d9e-5b8a-4c7d-9e21-0a6b4f8d2c11" }),
});

export const ClaimParams = z.object({
  intent_id: IntentIdSchema.openapi({ param: { name: "intent_id", in: "path" }, example: "3f1c2d9e-5b8a-4c7d-9e21-0a6b4f8d2c11" }),
});

export const IntentStatusSchema = z.enum(INTENT_STATUSES);

export const Intent = z
  .object({
    intent_id: z.string(),
    site_id: z.string(),
    status: IntentStatusSchema,
    expected_device_identity: z.string().nullable().openapi({ description: "When set, a claim must present this device_identity (e.g. a serial number)" }),
    idempotency_key: z.string().nullable(),
    expires_at: z.string(),
    created_at: z.string(),
    updated_at: z.string(),
    created_by: z.number().int().nullable().openapi({ description: "User id of the operator who created the intent" }),
    device_id: z.string().nullable().openapi({ description: "The device created by the claim (consumed intents)" }),
    epoch_id: z.string().nullable().openapi({ description: "The lifecycle epoch created by the claim (consumed intents)" }),
    claimed_at: z.string().nullable(),
  })
  .openapi("EnrolmentIntent");

export const IntentWithToken = Intent.extend({
  claim_token: z.string().openapi({ description: "The one-time claim token. Shown only in this response; the service keeps only a bcrypt hash." }),
}).openapi("EnrolmentIntentWithToken");

export const IntentList = z
  .object({ intents: z.array(Intent), total: z.number().int().openapi({ description: "Intents matching the filter, across all pages" }) })
  .openapi("EnrolmentIntentList");

export const ListIntentsQuery = z.object({
  status: IntentStatusSchema.optional(),
  limit: z.coerce.number().int().min(1).max(500).default(50),
  offset: z.coerce.number().int().min(0).default(0),
});

export const CreateIntentBody = z
  .object({
    expected_device_identity: lineText().trim().min(1).max(256).nullish()
      .openapi({ description: "Optional identity (e.g. serial number) the claiming device must present", example: "SN-0042-7781" }),
    expires_in_hours: z.number().int().min(1).max(MAX_EXPIRES_IN_HOURS).default(DEFAULT_EXPIRES_IN_HOURS)
      .openapi({ description: `Hours until the intent expires (1-${MAX_EXPIRES_IN_HOURS}, default ${DEFAULT_EXPIRES_IN_HOURS})` }),
    idempotency_key: lineText().min(1).max(128).nullish()
      .openapi({ description: "Retry-safe creation: the same key on the same site returns the same intent" }),
  })
  .openapi("CreateEnrolmentIntentRequest");

export const UpdateIntentBody = z
  .object({ status: z.enum(["approved", "rejected", "revoked"]) })
  .openapi("UpdateEnrolmentIntentRequest");

export const ClaimBody = z
  .object({
    claim_token: lineText().min(1).max(512),
    device_name: lineText().trim().min(1).max(200).optional().openapi({ description: "Name of the new device, unique in the site (400 when taken); defaults to the device identity when that name is free, else the generated device id" }),
    device_type: lineText().trim().min(1).max(64).optional().openapi({ description: "Defaults to pos_terminal" }),
    device_identity: lineText().trim().min(1).max(256).optional().openapi({ description: "Required, and must match, when the intent has an expected device identity" }),
    expected_device_identity: lineText().trim().min(1).max(256).optional()
      .openapi({ description: "The original agents' name for `device_identity`, read when that is absent" }),
  })
  .openapi("ClaimEnrolmentIntentRequest");

/** The same answer as provisioning: the credentials flat and under `data` (the original service's envelope). */
export const ClaimResponse = ProvisionResponse;

export const toIntent = (row: IntentRow) => toIntentView(row);
