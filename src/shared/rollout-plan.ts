/**
 * Pure rules of rollouts shared by the Worker (planning) and the orchestrator (start windows):
 * time zones, local-time windows and wave generation (docs/rollouts.md).
 */

/** The defaults of a rollout's settings (documented on each field below and in docs/rollouts.md). */
export const ROLLOUT_DEFAULTS = {
  canaryPercent: 1,
  growth: 2,
  soakSeconds: 300,
  maxFailureRate: 0.05,
  minExecutions: 5,
  offlineCountsAsFailure: true,
  maxDevicesPerSite: 2,
  recoveryTimeoutS: 600,
} as const;

/** A rollout reaches at most this many devices (its plan travels to its orchestrator in one call). */
export const MAX_ROLLOUT_DEVICES = 5_000;

/** Whether `name` is an IANA time zone this runtime knows (e.g. `Europe/Paris`, `UTC`). */
export function isTimeZone(name: string): boolean {
  try {
    new Intl.DateTimeFormat("en-GB", { timeZone: name });
    return true;
  } catch {
    return false;
  }
}

/** Minutes since local midnight in `timeZone` at the instant `ms`. */
export function localMinutes(timeZone: string, ms: number): number {
  const parts = new Intl.DateTimeFormat("en-GB", { timeZone, hour: "2-digit", minute: "2-digit", hourCycle: "h23" }).formatToParts(new Date(ms));
  const hour = Number(parts.find((p) => p.type === "hour")?.value ?? 0);
  const minute = Number(parts.find((p) => p.type === "minute")?.value ?? 0);
  return (hour % 24) * 60 + minute;
}

/** `HH:MM` (24 h) as minutes since midnight; undefined when malformed. */
export function parseLocalTime(value: string): number | undefined {
  const m = /^([01]\d|2[0-3]):([0-5]\d)$/.exec(value);
  return m ? Number(m[1]) * 60 + Number(m[2]) : undefined;
}

/**
 * Whether `ms` falls in the daily window [start, end) of the site's local time; a window whose end
 * is before its start spans midnight (22:00–04:00).
 */
export function inWindow(window: { startLocal: string; endLocal: string }, timeZone: string, ms: number): boolean {
  const start = parseLocalTime(window.startLocal) ?? 0;
  const end = parseLocalTime(window.endLocal) ?? 0;
  const now = localMinutes(timeZone, ms);
  if (start === end) return true;
  return start < end ? now >= start && now < end : now >= start || now < end;
}

/**
 * Sizes of generated waves for `total` devices: a canary of `canaryPercent` % (at least one
 * device), then each wave `growth` times the one before, until every device has a wave.
 */
export function generatedWaveSizes(total: number, canaryPercent: number, growth: number): number[] {
  const sizes: number[] = [];
  let left = total;
  let size = Math.max(1, Math.ceil((total * canaryPercent) / 100));
  while (left > 0) {
    const take = Math.min(left, size);
    sizes.push(take);
    left -= take;
    size = Math.max(size + 1, Math.ceil(size * growth));
  }
  return sizes;
}

/** A job action's command segment, as jobs name it: a device type's plural (`pos_terminal` → `pos-terminals`). */
export function segmentOfDeviceType(deviceType: string): string {
  const slug = deviceType.trim().toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "") || "device";
  if (slug.length <= 3) return `${slug}-devices`;
  return slug.endsWith("s") ? slug : `${slug}s`;
}
