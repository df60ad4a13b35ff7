// node bench/analytics.mjs — what the analytics cost, on the built bundle served by workerd through
// Miniflare (scripts/lib/serve-bundle.mjs). Merges section "analytics" into bench/results.json.
//
// 1. Request-log overhead. `GET /` (the banner: logged, no I/O) and `GET /version` (a probe: never
//    logged) with logging off, on with the raw log in D1 (the local default), and on with the raw log
//    in Workers Analytics Engine (REQUEST_LOG_AE, as deployed). Each as req/s and as a ratio to the
//    same request with logging off. Every configuration has its own service; they take turns under
//    load, three rounds each, and report their median round.
// 2. D1 rows written per 1,000 logged requests by the same runs: the rollup upserts (the `flushes`
//    column counts them), one index entry per rollup row created, and the raw rows when they go to D1.
// 3. `GET /api/v1/metrics/api-performance?hours=168` over 7 days of hour and day rollups for 60
//    routes (2 status classes each, 25-bucket histograms): latency, one request at a time.
//
//   BENCH_DURATION=10 BENCH_CONNECTIONS=32 node bench/analytics.mjs
//   BENCH_SKIP_BUILD=1 node bench/analytics.mjs     # serve the dist/ already built
import { execSync } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { startService, ROOT } from "../scripts/lib/serve-bundle.mjs";
import { DURATION_S, json, load, printTable, startBaseline, writeResults } from "./lib.mjs";


const ROUTES = 60;
const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;
/** An isolate writes its rollups at most every 10 s (src/services/analytics-rollups.ts). */
const ROLLUP_FLUSH_WAIT_MS = 11_000;

if (!process.env.BENCH_SKIP_BUILD) {
  console.log("building the bundle…");
  execSync("npm run build --silent", { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });
}

const baseline = await startBaseline();
console.log(`measuring: ${DURATION_S} s per scenario`);
const base = await load("baseline (bare Worker, no-op)", { url: baseline.url });
await baseline.stop();

// Static assets off, as in bench/run.mjs: Miniflare emulates the platform's asset lookup with an extra worker hop.
const configs = [
  { key: "off", label: "logging off", options: { bindings: { REQUEST_LOG_ENABLED: "false" } } },
  { key: "d1", label: "logging on, raw log in D1", options: {} },
  { key: "ae", label: "logging on, raw log in Analytics Engine", options: { miniflare: { analyticsEngineDatasets: { REQUEST_LOG_AE: { dataset: "fleet_edge_request_log" } } } } },
];
const services = Object.fromEntries(await Promise.all(configs.map(async (c) => [c.key, await startService({ quiet: true, assets: false, ...c.options })])));
const median = (runs) => [...runs].sort((a, b) => a.requests_per_s - b.requests_per_s)[Math.floor(runs.length / 2)];

/**
 * The machine is shared, so its load drifts: the configurations take turns, ROUNDS times each, and
 * each reports its median round. Only one service is under load at a time.
 */
const ROUNDS = 3;
const ROUND_S = Math.max(2, Math.round(DURATION_S / 2));
const runs = Object.fromEntries(configs.map((c) => [c.key, { root: [], version: [] }]));
for (let round = 0; round < ROUNDS; round++) {
  for (const c of configs) {
    runs[c.key].root.push(await load(`GET / — ${c.label}`, { url: `${services[c.key].url}/`, duration: ROUND_S }));
    runs[c.key].version.push(await load(`GET /version — ${c.label}`, { url: `${services[c.key].url}/version`, duration: ROUND_S }));
  }
}
// The last rollup write of each service happens at most 10 s after the one before.
await sleep(ROLLUP_FLUSH_WAIT_MS);

async function measured(key) {
  const db = await services[key].mf.getD1Database("DB");
  const rollups = await db.prepare(
    "SELECT coalesce(sum(CASE WHEN period = 'hour' THEN count END), 0) AS requests, coalesce(sum(flushes), 0) AS upserts, count(*) AS rows FROM request_rollups",
  ).first();
  const raw = await db.prepare("SELECT count(*) AS n FROM api_request_logs").first();
  return { root: median(runs[key].root), version: median(runs[key].version), requests: rollups.requests, upserts: rollups.upserts, rollupRows: rollups.rows, rawRows: raw.n };
}
const off = await measured("off");
const onD1 = await measured("d1");
const onAe = { ...(await measured("ae")), service: services.ae };
await services.off.stop();
await services.d1.stop();

/** A histogram of realistic spread: 25 log-scale buckets around 15–150 ms. */
function histogram(total) {
  const buckets = Array.from({ length: 25 }, (_, i) => 53 + i);
  const weights = buckets.map((_, i) => Math.exp(-((i - 10) ** 2) / 30));
  const sum = weights.reduce((a, b) => a + b, 0);
  const counts = weights.map((w) => Math.max(1, Math.round((w / sum) * total)));
  return { json: JSON.stringify(Object.fromEntries(buckets.map((b, i) => [String(b), counts[i]]))), count: counts.reduce((a, b) => a + b, 0) };
}

let query;
try {
  const api = onAe.service.url;
  const db = await onAe.service.mf.getD1Database("DB");
  console.log(`seeding 7 days of hour and day request rollups for ${ROUTES} routes…`);
  const now = Date.now();
  const hourNow = Math.floor(now / HOUR_MS) * HOUR_MS;
  const dayNow = Math.floor(now / DAY_MS) * DAY_MS;
  const perHour = histogram(3_600);
  const perDay = histogram(86_400);
  const seed = (period, count, step, from, h) => db.prepare(
    `WITH RECURSIVE t(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM t WHERE i < ?1),
                    r(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM r WHERE j < ?2),
                    s(c) AS (SELECT 2 UNION ALL SELECT 4)
     INSERT INTO request_rollups (period, bucket_start, route, method, status_class, count, sum_ms, min_ms, max_ms, histogram, flushes)
     SELECT ?3, strftime('%Y-%m-%dT%H:%M:%S.000Z', (?4 - i * ?5) / 1000, 'unixepoch'), '/api/v1/bench/route-' || j || '/{id}', 'GET', c,
            ?6, ?6 * 40.0, 14.5, 160.0, ?7, 1
     FROM t, r, s`,
  ).bind(count, ROUTES - 1, period, from, step, h.count, h.json).run();
  await seed("hour", 24 * 7 + 1, HOUR_MS, hourNow, perHour);
  await seed("day", 8, DAY_MS, dayNow, perDay);
  const rows = await db.prepare("SELECT count(*) AS n FROM request_rollups WHERE route LIKE '/api/v1/bench/%'").first();

  const email = `bench-analytics-${Date.now()}@example.com`;
  const { data } = await json(`${api}/api/v1/auth/signup`, { method: "POST", body: JSON.stringify({ email, password: "bench-password" }) });
  await db.prepare("UPDATE users SET is_admin = 1 WHERE email = ?").bind(email).run();
  const headers = { authorization: `Bearer ${data.access_token}` };
  const url = `${api}/api/v1/metrics/api-performance?hours=168`;
  const answer = await json(url, { headers });
  if (answer.endpoints.filter((e) => e.endpoint.startsWith("/api/v1/bench/")).length !== ROUTES) throw new Error("api-performance did not list every seeded route");
  // Rounds again, reported by their median p99; the spread shows how much the shared machine moved.
  const weekRuns = [];
  const hourRuns = [];
  for (let round = 0; round < ROUNDS; round++) {
    weekRuns.push(await load(`api-performance?hours=168, ${ROUTES} routes × 7 days (1 connection)`, { url, headers, connections: 1, duration: ROUND_S }));
    hourRuns.push(await load(`api-performance?hours=1, ${ROUTES} routes (1 connection)`, { url: `${api}/api/v1/metrics/api-performance?hours=1`, headers, connections: 1, duration: ROUND_S }));
  }
  const byP99 = (list) => [...list].sort((a, b) => a.p99_ms - b.p99_ms);
  const week = byP99(weekRuns)[Math.floor(ROUNDS / 2)];
  const hour = byP99(hourRuns)[Math.floor(ROUNDS / 2)];
  week.notes = `p99 per round: ${weekRuns.map((r) => r.p99_ms).join(", ")} ms`;
  hour.notes = `p99 per round: ${hourRuns.map((r) => r.p99_ms).join(", ")} ms`;
  query = { week, hour, weekP99s: weekRuns.map((r) => r.p99_ms), seededRows: rows.n, endpoints: answer.endpoints.length };
} finally {
  await onAe.service.stop();
}

const ratio = (on, offRow) => +(on.requests_per_s / offRow.requests_per_s).toFixed(3);
const perThousand = (n, requests) => (requests ? +((n / requests) * 1000).toFixed(2) : null);
const writes = (run) => ({
  logged_requests: run.requests,
  rollup_upserts: run.upserts,
  rollup_rows: run.rollupRows,
  rollup_rows_written_per_1000: perThousand(run.upserts + run.rollupRows, run.requests),
  raw_rows: run.rawRows,
  // Each raw row also writes its two index entries.
  raw_rows_written_per_1000: perThousand(run.rawRows * 3, run.requests),
});

onD1.root.notes = `ratio to logging off ${ratio(onD1.root, off.root)}`;
onD1.version.notes = `ratio to logging off ${ratio(onD1.version, off.version)} (never logged)`;
onAe.root.notes = `ratio to logging off ${ratio(onAe.root, off.root)}`;
onAe.version.notes = `ratio to logging off ${ratio(onAe.version, off.version)} (never logged)`;
const rows = [base, off.root, off.version, onD1.root, onD1.version, onAe.root, onAe.version, query.week, query.hour];
console.log();
printTable(rows, base.requests_per_s);

const d1Writes = writes(onD1);
const aeWrites = writes(onAe);
const goals = {
  overhead_ratio_goal: 0.9,
  overhead_ratio_raw_log_in_d1: ratio(onD1.root, off.root),
  overhead_ratio_raw_log_in_analytics_engine: ratio(onAe.root, off.root),
  query_p99_goal_ms: 50,
  query_p99_ms: query.week.p99_ms,
  rows_per_1000_goal: 10,
  rows_per_1000_rollups: aeWrites.rollup_rows_written_per_1000,
  rows_per_1000_with_raw_log_in_d1: +(d1Writes.rollup_rows_written_per_1000 + d1Writes.raw_rows_written_per_1000).toFixed(2),
};
console.log();
console.log(`request-log overhead (GET /, on ÷ off): raw log in D1 ${goals.overhead_ratio_raw_log_in_d1}, in Analytics Engine ${goals.overhead_ratio_raw_log_in_analytics_engine} (goal ≥ 0.9)`);
console.log(`D1 rows written per 1,000 logged requests: rollups ${aeWrites.rollup_rows_written_per_1000} (${aeWrites.rollup_upserts} upserts, ${aeWrites.rollup_rows} rows for ${aeWrites.logged_requests} requests); ` +
  `with the raw log in D1 ${goals.rows_per_1000_with_raw_log_in_d1} (goal ≤ 10)`);
console.log(`api-performance?hours=168 over ${query.seededRows} rollup rows (${ROUTES} routes): p50 ${query.week.p50_ms} ms, p99 ${query.week.p99_ms} ms (rounds: ${query.weekP99s.join(", ")}; goal < 50 ms)`);
writeResults("analytics", {
  scenarios: rows,
  writes: { raw_log_in_d1: d1Writes, raw_log_in_analytics_engine: aeWrites },
  query: { routes: ROUTES, seeded_rows: query.seededRows, endpoints_listed: query.endpoints, week: query.week, hour: query.hour },
  goals,
});
