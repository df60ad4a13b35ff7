#!/usr/bin/env node
// Verifies the hash chains of an exported audit segment offline: NDJSON, one event per line, with the
// fields the API shows (id, event_type, …, created_at, prev_hash, hash). Usage:
//
//   node scripts/verify-audit-chain.mjs export.ndjson      (or: … < export.ndjson)
//
// Prints a JSON report per chain (a site's, or "" for the service-wide chain) and exits 0 when every
// chain holds, 1 when one is broken, 2 on unreadable input. The canonical form and the link are the
// ones in src/shared/audit-chain.ts (docs/audit.md, "Hash chain"); keep the two in step.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

const GENESIS_HASH = "0".repeat(64);
const COVERED = [
  "id", "event_type", "category", "severity", "description", "user_id", "job_id", "device_id", "site_id",
  "event_metadata", "ip_address", "user_agent", "session_id", "created_at",
];

export function canonicalJson(value) {
  if (value === null || value === undefined) return "null";
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (typeof value === "object") {
    const entries = Object.entries(value).filter(([, v]) => v !== undefined).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

export const canonicalAuditEvent = (event) =>
  canonicalJson(COVERED.map((field) => (field === "event_metadata" ? event.event_metadata ?? {} : event[field] ?? null)));

export const chainHash = (prevHash, canonical) => createHash("sha256").update(`${prevHash}\n${canonical}`).digest("hex");

/** Checks events (in export order) chain by chain; returns one report per chain. */
export function verifyEvents(events) {
  const chains = new Map();
  for (const event of [...events].sort((a, b) => a.id - b.id)) {
    const key = event.site_id ?? "";
    let chain = chains.get(key);
    if (!chain) {
      chain = { chain: key, ok: true, checked: 0, sealed: 0, unsealed: 0, first_unsealed_id: null, anchor: null, broken_at: null, last: undefined };
      chains.set(key, chain);
    }
    if (!chain.ok) continue;
    chain.checked++;
    if (!event.hash || !event.prev_hash) {
      chain.unsealed++;
      chain.first_unsealed_id ??= event.id;
      continue;
    }
    const fail = (reason, id = event.id) => { chain.ok = false; chain.broken_at = { id, reason }; };
    if (chain.first_unsealed_id !== null) { fail("seal_missing", chain.first_unsealed_id); continue; }
    if (chain.last === undefined) chain.anchor = { id: event.id, prev_hash: event.prev_hash, genesis: event.prev_hash === GENESIS_HASH };
    else if (event.prev_hash !== chain.last) { fail("prev_hash_mismatch"); continue; }
    if (chainHash(event.prev_hash, canonicalAuditEvent(event)) !== event.hash) { fail("hash_mismatch"); continue; }
    chain.sealed++;
    chain.last = event.hash;
  }
  return [...chains.values()].map(({ last: _last, ...report }) => report);
}

function main() {
  const path = process.argv[2];
  let events;
  try {
    const text = readFileSync(path ?? 0, "utf8");
    events = text.split("\n").filter((line) => line.trim()).map((line) => JSON.parse(line));
  } catch (error) {
    console.error(`cannot read the export: ${error.message}`);
    process.exit(2);
  }
  const reports = verifyEvents(events);
  console.log(JSON.stringify({ ok: reports.every((r) => r.ok), chains: reports }, null, 2));
  process.exit(reports.every((r) => r.ok) ? 0 : 1);
}

if (import.meta.url === `file://${process.argv[1]}`) main();
