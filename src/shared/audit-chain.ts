/**
 * The audit trail's hash chain. Every audit row belongs to one chain: its site's, or the
 * service-wide chain when it names no site. A row's `hash` is SHA-256 over the previous row's hash
 * (in id order, within the chain) and the row's canonical form, so changing, removing or reordering
 * a sealed row breaks the link at that row. scripts/verify-audit-chain.mjs repeats this exact
 * computation for an exported segment; keep the two in step (docs/audit.md, "Hash chain").
 */

/** The `prev_hash` of a chain's first row. */
export const GENESIS_HASH = "0".repeat(64);

/** The chain a row belongs to: its site id, or "" for the service-wide chain. */
export const chainOf = (siteId: string | null | undefined) => siteId ?? "";

/** The fields a row's hash covers, as the API and exports name them. */
export interface ChainedFields {
  id: number;
  event_type: string;
  category: string;
  severity: string;
  description: string | null;
  user_id: number | null;
  job_id: string | null;
  device_id: string | null;
  site_id: string | null;
  event_metadata: unknown;
  ip_address: string | null;
  user_agent: string | null;
  session_id: string | null;
  created_at: string;
}

const COVERED: (keyof ChainedFields)[] = [
  "id", "event_type", "category", "severity", "description", "user_id", "job_id", "device_id", "site_id",
  "event_metadata", "ip_address", "user_agent", "session_id", "created_at",
];

/** JSON with object keys sorted at every depth, so equal values always serialise alike. */
export function canonicalJson(value: unknown): string {
  if (value === null || value === undefined) return "null";
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (typeof value === "object") {
    const entries = Object.entries(value).filter(([, v]) => v !== undefined).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

/** A row's canonical form: the covered fields in a fixed order, metadata with sorted keys. */
export function canonicalAuditEvent(row: ChainedFields): string {
  return canonicalJson(COVERED.map((field) => (field === "event_metadata" ? row.event_metadata ?? {} : row[field] ?? null)));
}

const hex = (bytes: ArrayBuffer) => [...new Uint8Array(bytes)].map((b) => b.toString(16).padStart(2, "0")).join("");

/** The link: SHA-256 (hex) of `prev_hash + "\n" + canonical form`. */
export async function chainHash(prevHash: string, canonical: string): Promise<string> {
  return hex(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(`${prevHash}\n${canonical}`)));
}

/** Why a chain fails verification at a row. */
export type ChainBreak =
  /** The row's content no longer matches its hash: it was changed after it was sealed. */
  | "hash_mismatch"
  /** The row's prev_hash is not the hash of the chain's previous row: a row was removed or reordered. */
  | "prev_hash_mismatch"
  /** The row carries no hash although later rows of its chain do: its seal was removed. */
  | "seal_missing";
