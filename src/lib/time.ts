export const nowIso = (now: Date = new Date()) => now.toISOString();

export const isoAfter = (ms: number, from: Date = new Date()) => new Date(from.getTime() + ms).toISOString();

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
