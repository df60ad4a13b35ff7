import { z } from "@hono/zod-openapi";
import { proseText } from "../../lib/text";
import { SiteIdSchema } from "../sites/schema";
import { DeviceIdSchema } from "../devices/schema";
import { AnomalyReasonSchema, DeviceAnomalySchema, RiskAssessmentSchema } from "../../shared/hub-contract";
import { INTENTS, PERSONAS, personaNamed } from "../../services/ai";

const percent = (description: string) => z.number().min(0).max(100).optional().openapi({ description });

export const AnalyzeBody = z
  .object({
    device_id: DeviceIdSchema.optional().openapi({ description: "Score against this device's own baseline (viewer role on its site); without it, fleet-wide defaults" }),
    metrics: z
      .object({
        cpu_usage: percent("Percent"),
        memory_usage: percent("Percent"),
        disk_usage: percent("Percent"),
        temperature: z.number().min(-50).max(150).optional().openapi({ description: "°C" }),
        network_latency: z.number().min(0).max(600_000).optional().openapi({ description: "Milliseconds" }),
        error_rate: z.number().min(0).max(1).optional().openapi({ description: "Fraction of failed operations, 0–1" }),
      })
      .refine((m) => Object.values(m).some((v) => v !== undefined), "At least one metric is required"),
  })
  .openapi("AiAnalyzeRequest");

export const AnalyzeResponse = z
  .object({
    device_id: z.string().nullable(),
    anomaly_score: z.number().min(0).max(1).nullable().openapi({ description: "0.0–1.0; null when the device has too little history and too few peers to judge" }),
    is_anomaly: z.boolean(),
    basis: z.enum(["device", "peers", "fleet_defaults"]).nullable(),
    reasons: z.array(AnomalyReasonSchema),
    explanation: z.string(),
    samples_needed: z.number().int().optional(),
  })
  .openapi("AiAnalyzeResponse");

export const AnomalyQuery = z.object({
  site_id: SiteIdSchema.optional().openapi({ description: "Only this site (viewer role); default: every site the caller can read" }),
  min_score: z.coerce.number().min(0).max(1).default(0.5).openapi({ description: "Lowest score listed (default 0.5, the anomaly threshold)" }),
});

export const AnomalyList = z
  .object({ anomalies: z.array(DeviceAnomalySchema), total: z.number().int(), min_score: z.number() })
  .openapi("AiAnomalyList");

export const PredictQuery = z.object({
  hours: z.coerce.number().int().min(1).max(168).default(24).openapi({ description: "The window of history read (default 24, max 168)" }),
});

export const PredictResponse = RiskAssessmentSchema.extend({ device_id: z.string(), site_id: z.string() }).openapi("AiPrediction");

export const QueryBody = z
  .object({
    query: proseText().trim().min(1).max(2000),
    device_id: DeviceIdSchema.optional().openapi({ description: "A device to answer about (viewer role on its site), besides any named in the text" }),
    site_id: SiteIdSchema.optional().openapi({ description: "Limit fleet-level answers to this site (viewer role)" }),
  })
  .openapi("AiQueryRequest");

const Source = z.object({ type: z.string(), id: z.string(), detail: z.string() });
const StatusDevice = z.object({
  device_id: z.string(), site_id: z.string(), name: z.string(), status: z.string(), last_seen: z.string().nullable(),
  risk_score: z.number().nullable(), risk_level: z.string(), risk_explanation: z.string(), recommendations: z.array(z.string()),
  anomaly_score: z.number().nullable(), anomaly_explanation: z.string(),
  recent_events: z.array(z.object({ type: z.string(), at: z.string(), summary: z.string() })),
});
const Exchange = z.object({ query: z.string(), response: z.string(), intent: z.string(), device_ids: z.array(z.string()), at: z.string() });

export const QueryResponse = z
  .object({
    response: z.string().openapi({ description: "The answer, composed from the records; starts with the CURRENT SYSTEM STATUS block when a device is named" }),
    intent: z.enum(INTENTS),
    persona: z.enum(PERSONAS),
    sources: z.array(Source),
    context: z.object({
      device_ids: z.array(z.string()),
      blocks: z.array(z.union([
        z.object({ label: z.literal("CURRENT SYSTEM STATUS"), devices: z.array(StatusDevice) }),
        z.object({ label: z.literal("CONVERSATION HISTORY"), exchanges: z.array(Exchange) }),
      ])).openapi({ description: "In priority order: the live status of the named devices first, then the earlier exchanges" }),
    }),
  })
  .openapi("AiQueryResponse");

export const ModeBody = z
  .object({
    mode: z.string().max(40)
      .refine((v) => personaNamed(v) !== undefined, `One of ${PERSONAS.join(", ")} (any case)`)
      .openapi({ description: "Maintenance, Predictive or Executive (any case)", example: "Predictive" }),
  })
  .openapi("AiModeRequest");

export const ModeResponse = z
  .object({ mode: z.enum(PERSONAS), updated_at: z.string().nullable().openapi({ description: "Null while the default applies" }) })
  .openapi("AiMode");

export const ConversationDeleted = z.object({ deleted: z.number().int() }).openapi("AiConversationDeleted");
