import type { OpenAPIHono } from "@hono/zod-openapi";
import type { AppEnv } from "../env";
import { deprecatedAlias } from "../middleware/deprecation";
import type { Router, RouterFactory } from "./mount";
import { healthRoutes, rootRoutes } from "./health/routes";
import { docsRoutes } from "./docs/routes";
import { authRoutes } from "./auth/routes";
import { siteRoutes } from "./sites/routes";
import { siteMemberRoutes } from "./sites/members";
import { invitationRoutes } from "./invitations/routes";
import { intentClaimRoutes, siteIntentRoutes } from "./intents/routes";
import { siteEnrolmentRoutes } from "./devices/site-routes";
import { liveRoutes } from "./live/routes";
import { tenantRoutes } from "./tenants/routes";
import { deviceRoutes, siteDeviceRoutes } from "./devices/routes";
import { commandRoutes, deviceCommandRoutes } from "./commands/routes";
import { deviceHealthRoutes } from "./device-health/routes";
import { deviceCallRoutes, deviceMetricsRoutes } from "./device-calls/routes";
import { agentsRoutes } from "./agents/routes";
import { jobRoutes, siteJobRoutes } from "./jobs/routes";
import { auditRoutes } from "./audit/routes";
import { auditExportRoutes } from "./audit/export";
import { auditReportRoutes } from "./audit/reports";
import { auditRetentionRoutes } from "./audit/retention";
import { auditStatusRoutes } from "./audit/status";
import { auditTrailRoutes } from "./audit/trail-routes";
import { auditAlertRoutes } from "./audit/alert-routes";
import { auditIntegrationRoutes } from "./audit/integration-routes";
import { analyticsRoutes } from "./analytics/routes";
import { metricsRoutes } from "./metrics/routes";
import { pushRoutes } from "./push/routes";
import { rolloutRoutes } from "./rollouts/routes";
import { siteTimeZoneRoutes } from "./sites/time-zone";
import { aiAssistantRoutes, aiV1Routes, legacyPredictRoutes } from "./ai/routes";
import { dashboardRoutes } from "./dashboard/routes";
import { agentTwinRoutes, deviceTwinRoutes, siteTwinRoutes, tenantTwinRoutes } from "./twins/routes";
import { deviceLifecycleRoutes, deviceSiteSummaryRoutes } from "./devices/lifecycle";
import { devicePermissionRoutes } from "./devices/permissions";
import { deviceConfigHistoryRoutes, devicePushPollRoutes, deviceReportRoutes } from "./device-calls/reports";

/**
 * One mount: the router serving `prefix`. A router with unversioned `aliases` is a factory, built
 * again for each alias, whose answers there are deprecated and name the same path under `prefix`
 * as their successor.
 */
export type RouteMount =
  | { prefix: string; router: Router; aliases?: never }
  | { prefix: string; router: RouterFactory; aliases: readonly string[] };

/**
 * Every mount of the API: to find what serves a URL, find its prefix here. Several routers share
 * a prefix; they are tried in the order listed, which matters only where one's fixed path could
 * be read as another's parameter (noted below).
 */
export const routeTable = (openApiDocument: () => object): readonly RouteMount[] => [
  // Service: banner, health, documentation
  { prefix: "/", router: rootRoutes },
  { prefix: "/", router: docsRoutes(openApiDocument) },
  { prefix: "/api/v1/health", router: healthRoutes },

  // The operator dashboard: a screen opened by its address (its page and files are static assets)
  { prefix: "/", router: dashboardRoutes },

  { prefix: "/api/v1/auth", router: authRoutes },

  // A site and what hangs off it
  { prefix: "/api/v1/sites", router: siteRoutes, aliases: ["/sites"] },
  { prefix: "/api/v1/sites", router: siteMemberRoutes },
  { prefix: "/api/v1/sites", router: siteIntentRoutes },
  { prefix: "/api/v1/sites", router: siteEnrolmentRoutes },
  { prefix: "/api/v1/sites", router: liveRoutes() },
  { prefix: "/api/v1/enrolment-intents", router: intentClaimRoutes },
  { prefix: "/api/v1/tenants", router: tenantRoutes },
  { prefix: "/api/v1/invitations", router: invitationRoutes },

  // Devices: registration per site, then the registry. The command routes come before the
  // registry because the device's poll `/devices/pending` would otherwise be read as
  // `/devices/{device_id}`.
  { prefix: "/api/v1/devices/sites", router: siteDeviceRoutes, aliases: ["/sites"] },
  // The caller's sites seen from the registry: before the registry, which would read `sites` as a device id.
  { prefix: "/api/v1/devices/sites", router: deviceSiteSummaryRoutes() },
  { prefix: "/api/v1/devices", router: deviceCommandRoutes, aliases: ["/devices"] },
  { prefix: "/api/v1/devices", router: deviceRoutes, aliases: ["/devices"] },
  { prefix: "/api/v1/devices", router: deviceHealthRoutes, aliases: ["/devices"] },
  // Registration with the site in the body, lifecycle (retire, transfer, re-enrol, delete) and histories (docs/device-lifecycle.md)
  { prefix: "/api/v1/devices", router: deviceLifecycleRoutes() },
  // What each device's owner allows (docs/original-agents.md)
  { prefix: "/api/v1/devices", router: devicePermissionRoutes() },
  { prefix: "/api/v1/devices", router: deviceConfigHistoryRoutes() },

  // Calls devices make with X-Device-ID and X-API-Key
  { prefix: "/api/v1/agent", router: deviceCallRoutes, aliases: ["/agent"] },
  // The original agents' logs, audit events and configuration history (docs/original-agents.md)
  { prefix: "/api/v1/agent", router: deviceReportRoutes() },
  { prefix: "/api/v1/analytics", router: deviceMetricsRoutes() },

  // Analytics: what browsers, operators and devices report, and the metrics queried from it
  { prefix: "/api/v1/analytics", router: analyticsRoutes() },
  { prefix: "/api/v1/metrics", router: metricsRoutes() },

  // Operators' view of device agents
  { prefix: "/api/v1/agents", router: agentsRoutes, aliases: ["/agents"] },

  { prefix: "/api/v1/commands", router: commandRoutes, aliases: ["/commands"] },

  { prefix: "/api/v1/jobs/sites", router: siteJobRoutes, aliases: ["/sites"] },
  { prefix: "/api/v1/jobs", router: jobRoutes, aliases: ["/jobs"] },

  { prefix: "/api/v1/audit", router: auditRoutes, aliases: ["/audit"] },
  // Audit export, reports, retention and archives, and the trail's status (docs/audit-retention.md)
  { prefix: "/api/v1/audit", router: auditExportRoutes, aliases: ["/audit"] },
  { prefix: "/api/v1/audit", router: auditReportRoutes, aliases: ["/audit"] },
  { prefix: "/api/v1/audit", router: auditRetentionRoutes, aliases: ["/audit"] },
  { prefix: "/api/v1/audit", router: auditStatusRoutes, aliases: ["/audit"] },

  // Notifications to devices
  // Before the push routes, whose `/{push_id}` would read `/pending` as an id
  { prefix: "/api/v1/push", router: devicePushPollRoutes() },
  { prefix: "/api/v1/push", router: pushRoutes() },

  // Fleet-wide rollouts across sites, and the site time zone their start windows use (docs/rollouts.md)
  { prefix: "/api/v1/rollouts", router: rolloutRoutes() },
  { prefix: "/api/v1/sites", router: siteTimeZoneRoutes() },

  // The AI assistant: its own /api/ai paths, the versioned ones, and the replaced service's /predict
  { prefix: "/api/ai", router: aiAssistantRoutes() },
  { prefix: "/api/v1/ai", router: aiV1Routes() },
  { prefix: "/", router: legacyPredictRoutes() },

  // Device twins: desired and reported state, templates and drift (docs/twins.md)
  { prefix: "/api/v1/devices", router: deviceTwinRoutes() },
  { prefix: "/api/v1/sites", router: siteTwinRoutes() },
  { prefix: "/api/v1/tenants", router: tenantTwinRoutes() },
  { prefix: "/api/v1/agent", router: agentTwinRoutes() },
  // The live audit stream, hash-chain verification, alert rules and integrations (docs/audit.md)
  { prefix: "/api/v1/audit", router: auditTrailRoutes, aliases: ["/audit"] },
  { prefix: "/api/v1/audit", router: auditAlertRoutes, aliases: ["/audit"] },
  { prefix: "/api/v1/audit", router: auditIntegrationRoutes, aliases: ["/audit"] },
];

/**
 * Mounts the table: every versioned prefix first, then the aliases in the same order, so the
 * document lists the deprecated forms after the current ones.
 */
export function mountRoutes(app: OpenAPIHono<AppEnv>, openApiDocument: () => object) {
  const table = routeTable(openApiDocument);
  for (const mount of table) {
    app.route(mount.prefix, typeof mount.router === "function" ? mount.router({ deprecated: false }) : mount.router);
  }
  for (const mount of table) {
    if (!mount.aliases) continue;
    for (const alias of mount.aliases) {
      // Registered before the router's own routes, so it wraps them (and the auth they run).
      app.use(`${alias}/*`, deprecatedAlias(alias, mount.prefix));
      app.route(alias, mount.router({ deprecated: true }));
    }
  }
}
