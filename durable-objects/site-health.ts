import type { SiteHealth, SiteHealthDevice } from "../src/shared/hub-contract";
import { iso } from "../src/shared/time";

/** Summarises device statuses into a site's health: counts, percentage healthy and a one-line summary. */
/** The twin counts are the hub's to add (durable-objects/twins.ts). */
type DeviceStatusHealth = Omit<SiteHealth, "twin_in_sync_devices" | "twin_drifted_devices">;

export function summariseSiteHealth(siteId: string, list: SiteHealthDevice[], now: number): DeviceStatusHealth {
  const count = (...statuses: string[]) => list.filter((d) => statuses.includes(d.status)).length;
  const healthy = count("online", "healthy");
  const offline = count("offline");
  const error = count("error", "unhealthy");
  const total = list.length;
  const percentage = total ? Math.round((healthy / total) * 1000) / 10 : 0;
  let summary: string;
  if (total === 0) summary = "No devices registered";
  else if (healthy === total) summary = "All devices healthy";
  else summary = `${healthy} of ${total} devices healthy` + (offline ? `, ${offline} offline` : "") + (error ? `, ${error} in error` : "");
  return {
    site_id: siteId,
    total_devices: total,
    healthy_devices: healthy,
    offline_devices: offline,
    error_devices: error,
    health_percentage: percentage,
    status_summary: summary,
    devices: list,
    last_updated: iso(now),
  };
}
