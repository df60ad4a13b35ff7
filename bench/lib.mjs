// Shared benchmark plumbing: a bare-runtime baseline, an autocannon runner, and the results table.
import autocannon from "autocannon";
import { Log, LogLevel, Miniflare } from "miniflare";
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { ROOT } from "../scripts/lib/serve-bundle.mjs";
import { MAX_NOT_OK_SHARE } from "./limits.mjs";

export { DEVICE_LIMIT, devicesFor, MAX_NOT_OK_SHARE } from "./limits.mjs";

export const DURATION_S = Number(process.env.BENCH_DURATION ?? 10);
export const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
/** A paced run's length: its p99 is the 1 % slowest, so one hiccup of the machine weighs less in a longer run. */
export const PACED_DURATION_S = Number(process.env.BENCH_PACED_DURATION ?? 30);
export const RESULTS_PATH = join(ROOT, "bench", "results.json");

/**
 * The baseline: a Worker that only answers "ok", on the same workerd build through the same
 * Miniflare API, so every ratio cancels out the machine and the runtime. `directUrl` reaches it
 * without Miniflare's development entry worker, as `startService({ direct: true })` does the service.
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
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
  });
  const url = (await mf.ready).toString().replace(/\/$/, "");
  const directUrl = (await mf.unsafeGetDirectURL()).toString().replace(/\/$/, "");
  return { url, directUrl, stop: () => mf.dispose() };
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
 *
 * The client runs in a Node process of its own (bench/paced-client.mjs): any pause of the client
 * lands in every latency it measures, and this process also hosts Miniflare and autocannon's heap.
 *
 * Read a latency at a Worker's direct socket (`directUrl`) when it should be the Worker's own. Every
 * request to Miniflare's main address first passes its development entry worker, which is not
 * deployed; under a steady 1,040 req/s its garbage grows and its clean-ups stall the one workerd
 * thread, so the bare Worker's p99 there climbs from about 10 to 55 ms within 40 s, while at the
 * direct socket it stays at 3–7 ms (README, "Site reads").
 *
 * `method` and `body` (a string) default to a GET without one; `rotate`, a list of header sets, is
 * taken in turn, one per request, on top of `headers` (a device call rotating over devices).
 */
export async function paced(name, { url, method, body, headers = {}, rotate, ratePerS, durationS = PACED_DURATION_S }, { success = 200 } = {}) {
  const child = spawn(process.execPath, [join(ROOT, "bench", "paced-client.mjs")], { stdio: ["pipe", "pipe", "inherit"] });
  child.stdin.end(JSON.stringify({ url, method, body, headers, rotate, ratePerS, durationS, success }));
  let out = "";
  for await (const chunk of child.stdout) out += chunk;
  const code = await new Promise((resolve) => (child.exitCode !== null ? resolve(child.exitCode) : child.once("exit", resolve)));
  if (code !== 0) throw new Error(`paced client for "${name}" exited with ${code}`);
  const figures = JSON.parse(out);
  const ok = figures.by_status[success] ?? 0;
  const notOk = Object.fromEntries(Object.entries(figures.by_status).filter(([status]) => status !== String(success)));
  return {
    name,
    success_status: success,
    offered_per_s: ratePerS,
    requests_per_s: Math.round(ok / figures.seconds),
    p50_ms: figures.p50_ms,
    p99_ms: figures.p99_ms,
    p999_ms: figures.p999_ms,
    total: figures.total,
    ok,
    not_ok: notOk,
    errors: figures.errors,
    not_ok_share: figures.total ? +((figures.total - ok) / figures.total).toFixed(4) : 1,
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
