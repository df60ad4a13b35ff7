// List prices the cost bench (bench/cost.mjs) converts its counts with: the ONE place they live.
//
// Every figure is a published list price in US dollars, as published, checked November 2026 — from
// memory of the vendors' pricing pages (this machine cannot browse), so VERIFY BEFORE BUDGETING: open
// each `source` and compare. Included monthly allowances (Workers Paid's 10 M requests, 1 M Durable
// Object requests, ...) are left out on purpose: the bench prices the marginal device of a fleet that
// has used them up, which is what a per-device figure is for.

export const CHECKED = "November 2026";

export const CLOUDFLARE = {
  workers: {
    source: "https://developers.cloudflare.com/workers/platform/pricing/",
    plan: "Workers Paid (Standard usage model)",
    request_usd_per_million: 0.30,
    cpu_ms_usd_per_million: 0.02,
  },
  durable_objects: {
    source: "https://developers.cloudflare.com/durable-objects/platform/pricing/",
    plan: "Workers Paid, SQLite storage backend",
    request_usd_per_million: 0.15,
    /** Incoming WebSocket messages are billed as requests at this ratio (20 messages = 1 request). */
    websocket_messages_per_request: 20,
    /** Billed on the 128 MB every active object is allocated, while it runs (not while hibernated). */
    duration_usd_per_million_gb_s: 12.50,
    memory_gb: 0.128,
    sqlite_rows_read_usd_per_million: 0.001,
    sqlite_rows_written_usd_per_million: 1.00,
    storage_usd_per_gb_month: 0.20,
  },
  d1: {
    source: "https://developers.cloudflare.com/d1/platform/pricing/",
    plan: "Workers Paid",
    rows_read_usd_per_million: 0.001,
    rows_written_usd_per_million: 1.00,
    storage_usd_per_gb_month: 0.75,
  },
};

export const AWS_IOT_CORE = {
  source: "https://aws.amazon.com/iot-core/pricing/",
  region: "us-east-1",
  tier: "first 1 billion messages a month (the highest per-message tier), MQTT, no Device Shadow or registry operations",
  connectivity_usd_per_million_minutes: 0.08,
  /** Metered in 5 KB increments; every message the bench models is smaller. */
  messages_usd_per_million: 1.00,
  /** A device's data is only stored or acted on through a rule: one rule triggered and one action per message. */
  rules_triggered_usd_per_million: 0.15,
  rule_actions_usd_per_million: 0.15,
};

export const AZURE_IOT_HUB = {
  source: "https://azure.microsoft.com/pricing/details/iot-hub/",
  /** Standard tiers: the basic ones cannot send cloud-to-device messages, so they cannot carry commands. */
  tiers: [
    { name: "S1", usd_per_unit_month: 25, messages_per_unit_day: 400_000 },
    { name: "S2", usd_per_unit_month: 250, messages_per_unit_day: 6_000_000 },
    { name: "S3", usd_per_unit_month: 2_500, messages_per_unit_day: 300_000_000 },
  ],
  /** Messages are metered in 4 KB blocks; every message the bench models is smaller. */
  message_block_kb: 4,
};
