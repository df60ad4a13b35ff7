// Shared benchmark plumbing: a bare-runtime baseline, an autocannon runner, and the results table.
import autocannon from "autocannon";
import { Log, LogLevel, Miniflare } from "miniflare";
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../scripts/lib/serve-bundle.mjs";
import { MAX_NOT_OK_SHARE } from "./limits.mjs";

export { DEVICE_LIMIT, devicesFor, MAX_NOT_OK_SHARE } from "./limits.mjs";

export const DURATION_S = Number(process.env.BENCH_DURATION ?? 10);
export const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
export const RESULTS_PATH = join(ROOT, "bench", "results.json");

/**
 * The baseline: a Worker that only answers "ok", on the same workerd build through the same
 * Miniflare API, so every ratio cancels out the machine and the runtime.
 */
export async function startBaseline() {
  const mf = new Miniflare({
    modules: true,
    script: 'export default { fetch() { return new Response("ok"); } };',
    compatibilityDate: "2026-04-20",
    host: "127.0.0.1",
    port: 0,
    cf: false,
    log: new Log(LogLevel.WARN),
  });
  const url = (await mf.ready).toString().replace(/\/$/, "");
  return { url, stop: () => mf.dispose() };
}

/**
 * Runs one autocannon scenario and returns its figures. `requests` may rotate over devices.
 * `requests_per_s` counts only answers with the scenario's `success` status; every other answer is
 * counted apart, by status (`not_ok`), as are connection errors and timeouts (`errors`).
 */
export async function load(name, options, { success = 200 } = {}) {
  const result = await autocannon({
    connections: CONNECTIONS,
    duration: DURATION_S,
    ...options,
  });
  const byStatus = Object.fromEntries(Object.entries(result.statusCodeStats ?? {}).map(([status, { count }]) => [status, count]));
  const ok = byStatus[String(success)] ?? 0;
  const notOk = Object.fromEntries(Object.entries(byStatus).filter(([status]) => status !== String(success)));
  const errors = result.errors + result.timeouts;
  const attempts = ok + Object.values(notOk).reduce((a, b) => a + b, 0) + errors;
  return {
    name,
    success_status: success,
    requests_per_s: Math.round(ok / (result.duration || DURATION_S)),
    p50_ms: result.latency.p50,
    p99_ms: result.latency.p99,
    total: attempts,
    ok,
    not_ok: notOk,
    errors,
    not_ok_share: attempts ? +((attempts - ok) / attempts).toFixed(4) : 1,
  };
}

/**
 * An open-loop run at a fixed rate: request i is due at start + i / rate, sent on time whatever the
 * earlier ones are doing, and its latency counts from when it was due (so a stall is not hidden by
 * the client waiting it out). autocannon's own rate option is no substitute: it lets each connection
 * send its whole second's quota at once, so its p99 measures that burst's queue.
 */
export async function paced(name, { url, headers = {}, ratePerS, durationS = DURATION_S }, { success = 200 } = {}) {
  const total = Math.round(ratePerS * durationS);
  const latencies = [];
  const byStatus = {};
  let errors = 0;
  const inFlight = [];
  const start = performance.now();
  let sent = 0;
  while (sent < total) {
    const now = performance.now();
    while (sent < total && start + (sent * 1000) / ratePerS <= now) {
      const due = start + (sent * 1000) / ratePerS;
      sent++;
      inFlight.push(fetch(url, { headers }).then(async (res) => {
        await res.arrayBuffer();
        byStatus[res.status] = (byStatus[res.status] ?? 0) + 1;
        if (res.status === success) latencies.push(performance.now() - due);
      }, () => { errors++; }));
    }
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  await Promise.all(inFlight);
  const seconds = (performance.now() - start) / 1000;
  const ok = byStatus[success] ?? 0;
  const notOk = Object.fromEntries(Object.entries(byStatus).filter(([status]) => status !== String(success)));
  const sorted = latencies.sort((a, b) => a - b);
  const at = (q) => (sorted.length ? Math.round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]) : 0);
  return {
    name,
    success_status: success,
    offered_per_s: ratePerS,
    requests_per_s: Math.round(ok / seconds),
    p50_ms: at(0.5),
    p99_ms: at(0.99),
    total,
    ok,
    not_ok: notOk,
    errors,
    not_ok_share: total ? +((total - ok) / total).toFixed(4) : 1,
  };
}

/**
 * Prints every scenario whose share of answers other than its success status is above
 * MAX_NOT_OK_SHARE, and sets a failing exit code: such a figure measures something else.
 * Returns whether all scenarios passed.
 */
export function assertScenarios(rows) {
  const failed = rows.filter((r) => r.not_ok_share !== undefined && r.not_ok_share > MAX_NOT_OK_SHARE);
  for (const r of failed) {
    const statuses = Object.entries(r.not_ok ?? {}).map(([status, n]) => `${status}: ${n}`).join(", ") || "none";
    console.error(`✖ ${r.name}: ${(r.not_ok_share * 100).toFixed(1)} % of ${r.total} answers were not ${r.success_status} ` +
      `(other statuses ${statuses}; connection errors and timeouts ${r.errors ?? 0}). The figure does not measure this scenario.`);
  }
  if (failed.length) process.exitCode = 1;
  return failed.length === 0;
}

/** Answers other than the success status, for the table: `429×12 500×1 err×3`, or `0`. */
const notOkCell = (r) => {
  if (r.not_ok === undefined) return "-";
  const parts = [...Object.entries(r.not_ok).map(([status, n]) => `${status}×${n}`), ...(r.errors ? [`err×${r.errors}`] : [])];
  return parts.length ? parts.join(" ") : "0";
};

export function printTable(rows, baselineRps) {
  const header = ["scenario", "req/s", "p50 ms", "p99 ms", "ratio to baseline", "not ok", "notes"];
  const lines = rows.map((r) => [
    r.name,
    String(r.requests_per_s ?? "-"),
    String(r.p50_ms ?? "-"),
    String(r.p99_ms ?? "-"),
    r.requests_per_s && baselineRps ? (r.requests_per_s / baselineRps).toFixed(3) : "-",
    notOkCell(r),
    r.notes ?? "",
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
  const fmt = (cells) => cells.map((c, i) => c.padEnd(widths[i])).join("  ");
  console.log(fmt(header));
  console.log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const l of lines) console.log(fmt(l));
}

/** Merges this run's scenarios into bench/results.json (other bench scripts add theirs). */
export function writeResults(section, data) {
  const existing = existsSync(RESULTS_PATH) ? JSON.parse(readFileSync(RESULTS_PATH, "utf8")) : {};
  existing[section] = { measured_at: new Date().toISOString(), duration_s: DURATION_S, connections: CONNECTIONS, ...data };
  writeFileSync(RESULTS_PATH, JSON.stringify(existing, null, 2) + "\n");
}

/** Calls `fn` for items with at most `concurrency` in flight. */
export async function pool(items, concurrency, fn) {
  const results = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i], i);
    }
  }));
  return results;
}

export async function json(url, init = {}) {
  const res = await fetch(url, { ...init, headers: { "Content-Type": "application/json", ...(init.headers ?? {}) } });
  const text = await res.text();
  if (!res.ok) throw new Error(`${init.method ?? "GET"} ${url} → ${res.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}
