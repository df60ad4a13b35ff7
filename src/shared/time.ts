/** ISO 8601 UTC with a `Z` for an epoch-milliseconds instant (the one timestamp format of the API). */
export const iso = (ms: number) => new Date(ms).toISOString();

/** The same, passing null through (optional timestamps). */
export const isoOrNull = (ms: number | null) => (ms === null ? null : iso(ms));

/**
 * Where the current time comes from. The site hub reads its time from one instead of the system
 * clock, so tests can move time (see `test/workers/clock.ts`) instead of editing stored state.
 */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** Parses `24h`, `7d`, `30m`, `90s` or `2w` into milliseconds; undefined when malformed. */
export function parseDuration(value: string): number | undefined {
  const match = /^(\d{1,6})\s*([smhdw])$/i.exec(value.trim());
  if (!match) return undefined;
  const unit = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }[match[2].toLowerCase() as "s"];
  return Number(match[1]) * unit;
}

/** Timestamps given without a zone are read as UTC. */
export function normaliseTimestamp(value: string): string | undefined {
  const hasZone = /(Z|[+-]\d{2}:?\d{2})$/i.test(value);
  const date = new Date(hasZone ? value : `${value}Z`);
  return Number.isNaN(date.getTime()) ? undefined : date.toISOString();
}

/** A live-channel position (`since`, Last-Event-ID): a non-negative integer, else undefined. */
export function parseSince(value: string | null | undefined): number | undefined {
  if (value === null || value === undefined || value.trim() === "") return undefined;
  const n = Number(value.trim());
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}
