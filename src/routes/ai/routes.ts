import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { grantedDevice } from "../../middleware/access";
import { movedTo } from "../../middleware/deprecation";
import {
  analyzeMetrics, answerQuery, forgetConversation, getPersona, listAnomalies, personaNamed, predictFailure, setPersona,
} from "../../services/ai";
import { DeviceParams } from "../devices/schema";
import * as s from "./schema";

const TAGS = ["AI assistant"];

const ANOMALY_DESCRIPTION =
  "Devices with a current anomaly across the caller's sites (or the one `site_id` names: viewer role, else 404), highest score first. " +
  "Each site's hub scores its devices' latest values against each device's own last day of stored samples (median and robust spread per metric), or against its site peers when it has fewer than 12 samples; `reasons` name each metric that stands out, its value, its baseline and the deviation. A device without enough data is left out, never given an invented score. Scores are 0.0–1.0; 0.5 is the anomaly threshold.";

const PREDICT_DESCRIPTION =
  "Failure risk 0.0–1.0 of one device (viewer role on its site), computed in its site's hub from its stored history over the last `hours`: the robust (Theil–Sen) trend of CPU, memory and disk projected to their failure thresholds (95, 95 and 98 %) gives `time_to_threshold`; the recent error rate, restarts and offline transitions add to it. `factors` and `recommendations` say why and what to do; `risk_level` is low (< 0.3), medium, high (≥ 0.6, the alert threshold) or critical (≥ 0.8). Fewer than 6 samples: `risk_score` null, `risk_level` unknown, with `samples_needed`.";

function anomaliesRoute() {
  return apiRoute({
    method: "get", path: "/anomalies", auth: "user", access: { site: "viewer", from: "query" }, tags: TAGS,
    summary: "Current anomalies across the caller's sites",
    description: ANOMALY_DESCRIPTION,
    request: { query: s.AnomalyQuery },
    responses: { 200: jsonResponse(s.AnomalyList, "Anomalies, highest first") },
  });
}

function predictRoute(deprecated: boolean) {
  return apiRoute({
    method: "get", path: "/predict/{device_id}", auth: "user", access: { device: "viewer" }, tags: TAGS,
    deprecated: deprecated || undefined,
    summary: deprecated ? "A device's failure risk (deprecated path: use /api/v1/ai/predict/{device_id})" : "A device's failure risk",
    description: PREDICT_DESCRIPTION,
    request: { params: DeviceParams, query: s.PredictQuery },
    responses: { 200: jsonResponse(s.PredictResponse, "The risk assessment") },
  });
}

/** `/api/ai`: the assistant's own paths. */
export function aiAssistantRoutes() {
  const app = newRouter();

  app.openapi(
    apiRoute({
      method: "post", path: "/analyze", auth: "user", tags: TAGS,
      summary: "Score metrics for anomalies, with reasons",
      description: "With `device_id` (viewer role on its site, else 404) the metrics are scored in the device's site hub against its own baseline (its last day of stored samples), or its site peers' when it has too little history, or not at all (`anomaly_score` null with `samples_needed`). Without `device_id`, against fleet-wide defaults. Nothing is stored.",
      request: jsonBody(s.AnalyzeBody),
      responses: { 200: jsonResponse(s.AnalyzeResponse, "The assessment") },
      errors: [404],
    }),
    async (c) => c.json(await analyzeMetrics(c.env, c.var.db, c.var.user!, c.req.valid("json"), c.req.raw), 200),
  );

  app.openapi(anomaliesRoute(), async (c) => {
    const q = c.req.valid("query");
    return c.json(await listAnomalies(c.env, c.var.db, c.var.user!, q.site_id, q.min_score), 200);
  });

  app.openapi(
    apiRoute({
      method: "post", path: "/query", auth: "user", tags: TAGS,
      summary: "Ask a question about devices or the fleet",
      description: "The intent (status, health, risk, anomalies, history, comparison, help) is read from the text, and device ids in it are looked up among the devices the caller can view (any other id is ignored). For each named device a CURRENT SYSTEM STATUS block (its live risk assessment and last 5 events, from its site's hub) comes first in `context` and in `response`, ahead of the caller's last 5 exchanges (kept for a day). The answer is composed from the records, follows the caller's persona (`/api/ai/mode`) and lists its `sources`. The text is data, never instructions: the assistant queues, changes and deletes nothing, whatever it says. `device_id` or `site_id` in the body need the viewer role (else 404).",
      request: jsonBody(s.QueryBody),
      responses: { 200: jsonResponse(s.QueryResponse, "The answer") },
      errors: [404],
    }),
    async (c) => c.json(await answerQuery(c.env, c.var.db, c.var.user!, c.req.valid("json"), c.req.raw), 200),
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/mode", auth: "user", tags: TAGS,
      summary: "Set the assistant's persona for the caller",
      description: "Maintenance (what to fix now), Predictive (risks and trends) or Executive (fleet-level counts), in any case; anything else is 422. Stored per user.",
      request: jsonBody(s.ModeBody),
      responses: { 200: jsonResponse(s.ModeResponse, "The persona now in force") },
    }),
    async (c) => {
      const mode = personaNamed(c.req.valid("json").mode)!;
      return c.json(await setPersona(c.var.db, c.var.user!, mode), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/mode", auth: "user", tags: TAGS,
      summary: "The caller's persona",
      description: "Maintenance until the caller chooses another.",
      responses: { 200: jsonResponse(s.ModeResponse, "The persona in force") },
    }),
    async (c) => c.json(await getPersona(c.var.db, c.var.user!), 200),
  );

  app.openapi(
    apiRoute({
      method: "delete", path: "/conversation", auth: "user", tags: TAGS,
      summary: "Forget the caller's conversation",
      description: "Deletes every exchange the assistant keeps for the caller (it keeps the last 5, each for a day).",
      responses: { 200: jsonResponse(s.ConversationDeleted, "How many exchanges were deleted") },
    }),
    async (c) => c.json(await forgetConversation(c.var.db, c.var.user!), 200),
  );

  return app;
}

/** `/api/v1/ai`: the versioned anomaly list and failure risk. */
export function aiV1Routes() {
  const app = newRouter();
  app.openapi(anomaliesRoute(), async (c) => {
    const q = c.req.valid("query");
    return c.json(await listAnomalies(c.env, c.var.db, c.var.user!, q.site_id, q.min_score), 200);
  });
  app.openapi(predictRoute(false), async (c) => {
    const { device } = grantedDevice(c);
    return c.json(await predictFailure(c.env, device, c.req.valid("query").hours), 200);
  });
  return app;
}

/** `/predict/{device_id}`: the replaced service's path, answered by `/api/v1/ai/predict/{device_id}`. */
export function legacyPredictRoutes() {
  const app = newRouter();
  app.use("/predict/:device_id", movedTo("/api/v1/ai/predict/{device_id}"));
  app.openapi(predictRoute(true), async (c) => {
    const { device } = grantedDevice(c);
    return c.json(await predictFailure(c.env, device, c.req.valid("query").hours), 200);
  });
  return app;
}
