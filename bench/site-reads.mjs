// node bench/site-reads.mjs — the two reads a dashboard makes of a site, site health
// (GET /api/v1/sites/{id}/health) and the site's device list (GET /api/v1/devices/sites/{id}/devices),
// at a 100-device and a 1,000-device site, on the built bundle served by workerd (Miniflare), beside
// the same bare-runtime baseline as bench/run.mjs and the app's own one-D1-query reference (GET /health).
// Both reads are answered from the site hub's roster (docs/architecture.md, "The site roster").
//
// The devices are written straight into D1 (one bcrypt hash shared by all), not registered through the
// API: registration is not what is measured, and the hub loads its roster from D1 on the first read
// exactly as it would after registration. A share of each site's devices then heartbeats, so the
// answers carry live presence. Prints one table and merges section "site_reads" into bench/results.json.
//
//   BENCH_DURATION=10 BENCH_CONNECTIONS=32 BENCH_PACED_DURATION=30 node bench/site-reads.mjs
//   BENCH_SKIP_BUILD=1 node bench/site-reads.mjs     # serve the dist/ already built
import { execSync } from "node:child_process";
import bcrypt from "bcryptjs";
import { startService, ROOT } from "../scripts/lib/serve-bundle.mjs";
import { assertScenarios, CONNECTIONS, DURATION_S, json, load, paced, pool, printTable, startBaseline, writeResults } from "./lib.mjs";

/** The original service's site health rate, measured on this machine with 100 devices per site. */
const ORIGINAL_SITE_HEALTH_RPS = 104;
const SITE_HEALTH_GOAL_RPS = 10 * ORIGINAL_SITE_HEALTH_RPS;
const SITE_HEALTH_P99_GOAL_MS = 50;
const SITES = [{ siteId: "BENCH-READS-100", devices: 100, online: 100 }, { siteId: "BENCH-READS-1000", devices: 1000, online: 100 }];
const API_KEY = "bench-site-reads-shared-device-key";

if (!process.env.BENCH_SKIP_BUILD) {
  console.log("building the bundle…");
  execSync("npm run build --silent", { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });
}

const baseline = await startBaseline();
// Static assets off, as in bench/run.mjs.
const service = await startService({ quiet: true, assets: false, direct: true });
const api = service.url;
const d1 = await service.mf.getD1Database("DB");

try {
  const email = `bench-reads-${Date.now()}@example.com`;
  const { data } = await json(`${api}/api/v1/auth/signup`, { method: "POST", body: JSON.stringify({ email, password: "bench-password" }) });
  const auth = { Authorization: `Bearer ${data.access_token}` };
  const keyHash = bcrypt.hashSync(API_KEY, 10);
  for (const site of SITES) {
    await json(`${api}/api/v1/sites/sites`, { method: "POST", headers: auth, body: JSON.stringify({ site_id: site.siteId, name: `Bench store ${site.devices}` }) });
    const ids = Array.from({ length: site.devices }, (_, i) => `${site.siteId}-POS-${i}`);
    const insert = d1.prepare(
      "INSERT INTO devices (device_id, site_id, name, device_type, api_key_hash, enrollment_method, created_at, updated_at) VALUES (?, ?, ?, 'pos_terminal', ?, 'manual', ?, ?)",
    );
    for (let i = 0; i < ids.length; i += 100) {
      const at = new Date().toISOString();
      await d1.batch(ids.slice(i, i + 100).map((id, j) => insert.bind(id, site.siteId, `Till ${i + j}`, keyHash, at, at)));
    }
    console.log(`${site.siteId}: ${site.devices} devices, ${site.online} of them heartbeating once…`);
    // First calls cost a bcrypt each, and an address may have only a few of those in flight at once.
    await pool(ids.slice(0, site.online), 3, async (id) => {
      const res = await fetch(`${api}/api/v1/agent/heartbeat`, {
        method: "POST", headers: { "content-type": "application/json", "x-device-id": id, "x-api-key": API_KEY }, body: "{}",
      });
      if (res.status !== 200) throw new Error(`heartbeat of ${id} → ${res.status} ${await res.text()}`);
    });
  }

  const rows = [];
  console.log(`measuring: ${DURATION_S} s per scenario, ${CONNECTIONS} connections`);
  const base = await load("baseline (bare Worker, no-op)", { url: baseline.url });
  rows.push(base);
  const oneQuery = { ...(await load("ref: one D1 query (GET /health)", { url: `${api}/health` })), notes: "SELECT 1" };
  rows.push(oneQuery);
  // The same authentication and access check as the site reads (the user, the site and the caller's
  // role, one D1 statement), without the hub: no site read can outrun it.
  const accessOnly = { ...(await load("ref: auth + site access (GET /api/v1/sites/{id})", { url: `${api}/api/v1/sites/${SITES[0].siteId}`, headers: auth })), notes: "no hub call" };
  rows.push(accessOnly);
  const measured = {};
  for (const site of SITES) {
    // A first read loads the roster; the scenario measures the steady state.
    await json(`${api}/api/v1/sites/${site.siteId}/health`, { headers: auth });
    const health = await load(`site health, ${site.devices}-device site`, { url: `${api}/api/v1/sites/${site.siteId}/health`, headers: auth });
    const list = await load(`site device list, ${site.devices}-device site`, { url: `${api}/api/v1/devices/sites/${site.siteId}/devices`, headers: auth });
    for (const r of [health, list]) r.notes = `${(r.requests_per_s / accessOnly.requests_per_s).toFixed(2)}× auth + access`;
    health.notes += `; ${(health.requests_per_s / ORIGINAL_SITE_HEALTH_RPS).toFixed(1)}× the original's ${ORIGINAL_SITE_HEALTH_RPS} req/s`;
    rows.push(health, list);
    measured[site.devices] = { health, list };
  }

  // The latency goal is read at the goal's rate, not at saturation: 32 connections kept busy queue
  // behind one another, so a saturated run's p99 is its queue, whatever one request costs. The requests
  // are paced evenly, from a client process of its own (bench/lib.mjs, paced), and sent to the
  // Worker's own socket: Miniflare's development entry worker, which is not deployed, puts a tail of
  // its own in front of every Worker, so the same read through it is shown beside, not as the goal.
  // The bare Worker at the same rate is the floor this runtime and machine put under any route.
  const siteHealthPath = `/api/v1/sites/${SITES[0].siteId}/health`;
  const pacedBaseline = {
    ...(await paced(`baseline at ${SITE_HEALTH_GOAL_RPS} req/s offered`, { url: baseline.directUrl, ratePerS: SITE_HEALTH_GOAL_RPS })),
    notes: "latency floor at the goal's rate",
  };
  const pacedHealth = {
    ...(await paced(`site health, 100-device site, at ${SITE_HEALTH_GOAL_RPS} req/s offered`, {
      url: `${service.directUrl}${siteHealthPath}`, headers: auth, ratePerS: SITE_HEALTH_GOAL_RPS,
    })),
    notes: "the p99 the goal is read from",
  };
  const pacedBaselineViaEntry = {
    ...(await paced(`baseline at ${SITE_HEALTH_GOAL_RPS} req/s, via Miniflare's entry worker`, { url: baseline.url, ratePerS: SITE_HEALTH_GOAL_RPS })),
    notes: "local development's own floor",
  };
  const pacedHealthViaEntry = {
    ...(await paced(`site health at ${SITE_HEALTH_GOAL_RPS} req/s, via Miniflare's entry worker`, {
      url: `${api}${siteHealthPath}`, headers: auth, ratePerS: SITE_HEALTH_GOAL_RPS,
    })),
    notes: "as `npm start` serves it",
  };
  rows.push(pacedBaseline, pacedHealth, pacedBaselineViaEntry, pacedHealthViaEntry);

  for (const r of rows) {
    r.ratio_to_baseline = +(r.requests_per_s / base.requests_per_s).toFixed(3);
    r.ratio_to_one_d1_query = +(r.requests_per_s / oneQuery.requests_per_s).toFixed(3);
    r.ratio_to_auth_and_access = +(r.requests_per_s / accessOnly.requests_per_s).toFixed(3);
  }
  console.log();
  printTable(rows, base.requests_per_s);
  const valid = assertScenarios(rows);
  const health100 = measured[100].health;
  const goals = {
    original_site_health_rps: ORIGINAL_SITE_HEALTH_RPS,
    site_health_rps_goal: SITE_HEALTH_GOAL_RPS,
    site_health_rps: health100.requests_per_s,
    site_health_times_original: +(health100.requests_per_s / ORIGINAL_SITE_HEALTH_RPS).toFixed(1),
    site_health_p99_goal_ms: SITE_HEALTH_P99_GOAL_MS,
    site_health_p99_ms_at_goal_rate: pacedHealth.p99_ms,
    site_health_p99_ms_saturated: health100.p99_ms,
    baseline_p99_ms_at_goal_rate: pacedBaseline.p99_ms,
    site_health_p99_ms_at_goal_rate_via_entry_worker: pacedHealthViaEntry.p99_ms,
    baseline_p99_ms_at_goal_rate_via_entry_worker: pacedBaselineViaEntry.p99_ms,
    met: health100.requests_per_s >= SITE_HEALTH_GOAL_RPS && pacedHealth.requests_per_s >= 0.95 * SITE_HEALTH_GOAL_RPS && pacedHealth.p99_ms < SITE_HEALTH_P99_GOAL_MS,
  };
  console.log();
  console.log(`goal: site health at 100 devices ≥ ${SITE_HEALTH_GOAL_RPS} req/s (10× the original's ${ORIGINAL_SITE_HEALTH_RPS}) with p99 < ${SITE_HEALTH_P99_GOAL_MS} ms → ` +
    `${health100.requests_per_s} req/s at saturation (${goals.site_health_times_original}×); at ${SITE_HEALTH_GOAL_RPS} req/s offered ${pacedHealth.requests_per_s} req/s answered, ` +
    `p99 ${pacedHealth.p99_ms} ms (the bare Worker's ${pacedBaseline.p99_ms} ms): ${goals.met ? "met" : "NOT met"}`);
  writeResults("site_reads", { sites: SITES, valid, scenarios: rows, goals });
} finally {
  await service.stop();
  await baseline.stop();
}
