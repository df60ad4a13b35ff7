import type { Context } from "hono";
import type { AppEnv } from "../../env";
import { apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import { grantedDevice } from "../../middleware/access";
import { agentDetail, agentSeries, listAgents, parsePeriod, pushToAgent } from "../../services/agents";
import { DeviceParams } from "../devices/schema";
import { ConsentRefusalSchema } from "../devices/permissions-schema";
import * as s from "./schema";
import type { MountOptions } from "../mount";

const TAGS = ["Agents"];

/**
 * `/api/v1/agents` and the deprecated `/agents`: device agents (simulated ones run in their site's
 * hub; a real device's agent view is built from what it reports).
 */
export function agentsRoutes(mount: MountOptions) {
  const app = newRouter();
  const deprecated = mount.deprecated || undefined;

  app.openapi(
    apiRoute({
      method: "get", path: "/", auth: "user", deprecated, tags: TAGS,
      summary: "Agents of the sites the caller may access",
      description: "One row per active device: lifecycle `state`, `config_version`, last health check, uptime. Served from the agents projection in the database, which each site's hub updates on every transition — no site is called per request. Filters: `site_id`, `device_type` (case-insensitive), `status` (an agent state, a device status or a health status). Newest devices first; `limit` (default 50, max 500) and `offset`, with `total`.",
      request: { query: s.AgentListQuery },
      responses: { 200: jsonResponse(s.AgentList, "Agents") },
    }),
    async (c) => {
      const q = c.req.valid("query");
      const page = await listAgents(c.var.db, c.var.user!, { siteId: q.site_id, deviceType: q.device_type, status: q.status, limit: q.limit, offset: q.offset });
      return c.json(page, 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "get", path: "/{device_id}", auth: "user", access: { device: "viewer" }, deprecated, tags: TAGS,
      summary: "One agent",
      description: "A simulated agent is brought up to now by its site's hub (lifecycle steps due, health computed at this moment, telemetry for unwatched time); a real device's view comes from its presence, latest telemetry and DNA. A suspended or retired device has no running agent (409).",
      request: { params: DeviceParams },
      responses: { 200: jsonResponse(s.AgentDetail, "The agent") },
      errors: [404, 409],
    }),
    async (c) => {
      const { device } = grantedDevice(c);
      return c.json(s.AgentDetail.parse(await agentDetail(c.env, device)), 200);
    },
  );

  app.openapi(
    apiRoute({
      method: "post", path: "/{device_id}/push", auth: "user", access: { device: "operator" }, deprecated, tags: TAGS,
      summary: "Push to an agent (operator)",
      description: [
        "Every body form existing clients send is accepted (notification, config push, `config_version`, action); unknown fields or actions are 422.",
        "Simulated agents act at once: a notification is `delivered`; a config push (or `config_version`, or action `update`) with a new version is `accepted` and runs the update lifecycle idle → downloading → updating → restarting → health_check → ready over some seconds (watch `agent.state` on the live channel), or fails back to idle with an error health record; the same version is `up_to_date`; while an update runs a different one is 409 unless `force`. Actions `restart`, `health_check`, `ping`, `backup`, `clear_cache` are `completed` with their result.",
        "For a real device the push is queued as a device command (`update_config`, `restart`, `notify`, or the action's name) and the response carries its `command_id`; a command needing a permission the device's owner has not granted is 403 with `required_permissions` and `missing_permissions` (docs/original-agents.md maps them), and nothing is queued.",
      ].join("\n\n"),
      request: { params: DeviceParams, ...jsonBody(s.PushBody) },
      responses: {
        200: jsonResponse(s.PushResponse, "What the agent did with the push"),
        403: jsonResponse(ConsentRefusalSchema, "A role too low, or the device's owner has not granted what the command needs (`required_permissions`, `missing_permissions`)"),
      },
      errors: [403, 404, 409, 429],
    }),
    async (c) => {
      const { device } = grantedDevice(c);
      return c.json(s.PushResponse.parse(await pushToAgent(c.env, c.var.db, c.var.user!, device, c.req.valid("json"), c.req.raw)), 200);
    },
  );

  const seriesRoute = <K extends "metrics" | "transactions" | "errors">(kind: K, summary: string, description: string, schema: typeof s.MetricsSeries | typeof s.TransactionsSeries | typeof s.ErrorsSeries) =>
    apiRoute({
      method: "get", path: `/{device_id}/${kind}`, auth: "user", access: { device: "viewer" }, deprecated, tags: TAGS, summary, description,
      request: { params: DeviceParams, query: s.PeriodQuery },
      responses: { 200: jsonResponse(schema, summary) },
      errors: [404, 409],
    });

  /** The caller's device and period, checked: what every series handler starts from. */
  const seriesOf = async (c: Context<AppEnv>, period: string, kind: "metrics" | "transactions" | "errors") => {
    const { device } = grantedDevice(c);
    return agentSeries(c.env, c.var.db, device, kind, parsePeriod(period)!);
  };

  app.openapi(
    seriesRoute("metrics", "Metrics series of an agent",
      "CPU, memory, disk, temperature, latency and error rate per bucket from the device's stored metrics history (delta storage in its site's hub: first sample after a restart, a snapshot every 5 minutes, any change beyond 5 %). Every bucket of the window is listed; empty ones have `samples: 0` and nulls.",
      s.MetricsSeries),
    async (c) => c.json(s.MetricsSeries.parse(await seriesOf(c, c.req.valid("query").period, "metrics")), 200),
  );
  app.openapi(
    seriesRoute("transactions", "Transactions series of an agent",
      "Transactions per bucket, from the cumulative `transaction_count` in the stored metrics history (a drop in the counter — midnight, reinstall — counts from zero). `transactions_today` is the latest stored counter.",
      s.TransactionsSeries),
    async (c) => c.json(s.TransactionsSeries.parse(await seriesOf(c, c.req.valid("query").period, "transactions")), 200),
  );
  app.openapi(
    seriesRoute("errors", "Errors series of an agent",
      "Error events per bucket with the average reported error rate. Simulated agents: failed updates and incidents from the agent's log; real devices: the error states they reported (device state history). `recent` lists the latest error events, newest first.",
      s.ErrorsSeries),
    async (c) => c.json(s.ErrorsSeries.parse(await seriesOf(c, c.req.valid("query").period, "errors")), 200),
  );

  return app;
}
