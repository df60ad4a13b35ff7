// node bench/rollout.mjs — a fleet-wide rollout on the built bundle served by workerd (Miniflare), in
// real time (alarms fire by themselves). 1,000 simulated devices in 50 sites of 20 get a restart:
//   1. baseline: one job per site, all 50 at once (no budget: every device of a site at the same time);
//   2. a rollout of the same action to the same devices, one wave, a budget of 2 devices per site.
// Reports each wall time, their ratio, and the most devices of any site the rollout had in flight
// (must not pass 2, else the run fails). Merges section "rollout" into bench/results.json.
//
//   BENCH_ROLLOUT_SITES=50 BENCH_ROLLOUT_PER_SITE=20 BENCH_ROLLOUT_BUDGET=2 node bench/rollout.mjs
//   BENCH_SKIP_BUILD=1 node bench/rollout.mjs       # serve the dist/ already built
import { execSync } from "node:child_process";
import { startService, ROOT } from "../scripts/lib/serve-bundle.mjs";
import { json, pool, writeResults } from "./lib.mjs";

const SITES = Number(process.env.BENCH_ROLLOUT_SITES ?? 50);
const PER_SITE = Number(process.env.BENCH_ROLLOUT_PER_SITE ?? 20);
const BUDGET = Number(process.env.BENCH_ROLLOUT_BUDGET ?? 2);
const TIMEOUT_MS = Number(process.env.BENCH_ROLLOUT_TIMEOUT_S ?? 1800) * 1000;

if (!process.env.BENCH_SKIP_BUILD) {
  console.log("building the bundle…");
  execSync("npm run build --silent", { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });
}

const service = await startService({ quiet: true, assets: false });
const api = service.url;
const d1 = await service.mf.getD1Database("DB");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(check, what) {
  const deadline = Date.now() + TIMEOUT_MS;
  let failures = 0;
  for (;;) {
    let value;
    try {
      value = await check();
    } catch (error) {
      // A kept-alive connection the server closed between two polls: ask again, but not forever.
      if (++failures > 20) throw error;
    }
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not done within ${TIMEOUT_MS / 1000} s`);
    await sleep(250);
  }
}

try {
  const email = `bench-rollout-${Date.now()}@example.com`;
  const { data } = await json(`${api}/api/v1/auth/signup`, { method: "POST", body: JSON.stringify({ email, password: "bench-password" }) });
  const auth = { Authorization: `Bearer ${data.access_token}` };
  const run = Date.now().toString(36).toUpperCase();
  const siteIds = Array.from({ length: SITES }, (_, i) => `BENCH-RO-${run}-${String(i).padStart(3, "0")}`);
  console.log(`creating ${SITES} sites × ${PER_SITE} simulated devices (written straight to D1: no bcrypt per device)…`);
  await pool(siteIds, 4, async (siteId) => {
    await json(`${api}/api/v1/sites/sites`, { method: "POST", headers: auth, body: JSON.stringify({ site_id: siteId, name: `Bench store ${siteId}` }) });
    const insert = d1.prepare("INSERT INTO devices (device_id, site_id, name, device_type, device_source, lifecycle_state) VALUES (?, ?, ?, 'pos_terminal', 'simulated', 'active')");
    await d1.batch(Array.from({ length: PER_SITE }, (_, i) => insert.bind(`${siteId}-D${String(i).padStart(3, "0")}`, siteId, `Till ${i}`)));
    // Reading the site's health brings its simulated agents up.
    await json(`${api}/api/v1/sites/${siteId}/health`, { headers: auth });
  });
  const devices = SITES * PER_SITE;

  console.log(`baseline: one restart job per site, ${SITES} jobs at once…`);
  const baselineStart = Date.now();
  const jobIds = await pool(siteIds, 8, async (siteId) =>
    (await json(`${api}/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", headers: auth, body: JSON.stringify({ action: "restart" }) })).job_id);
  const ours = new Set(jobIds);
  await until(async () => {
    const { jobs } = await json(`${api}/api/v1/jobs?limit=500`, { headers: auth });
    const states = jobs.filter((j) => ours.has(j.job_id)).map((j) => j.status);
    return states.length === jobIds.length && states.every((s) => s === "completed" || s === "failed");
  }, "baseline jobs");
  const baselineS = (Date.now() - baselineStart) / 1000;

  console.log(`rollout: the same restart to the same ${devices} devices, budget ${BUDGET} per site…`);
  const rolloutStart = Date.now();
  const created = await json(`${api}/api/v1/rollouts`, {
    method: "POST", headers: auth,
    body: JSON.stringify({ name: "bench", site_ids: siteIds, action: "restart", waves: [{ percent: 100 }], budget: { max_devices_per_site: BUDGET } }),
  });
  const done = await until(async () => {
    const r = await json(`${api}/api/v1/rollouts/${created.rollout_id}`, { headers: auth });
    return r.status === "completed" || r.status === "aborted" ? r : undefined;
  }, "rollout");
  const rolloutS = (Date.now() - rolloutStart) / 1000;
  const peak = Math.max(...done.progress.sites.map((s) => s.max_in_flight));

  const rows = [
    ["scenario", "devices", "wall time s", "ratio to baseline", "notes"],
    ["baseline: one job per site, all at once", String(devices), baselineS.toFixed(1), "1.00", "no budget"],
    [`rollout, budget ${BUDGET} per site`, String(devices), rolloutS.toFixed(1), (rolloutS / baselineS).toFixed(2),
      `${done.status}; ${done.progress.counts.succeeded} succeeded; most in flight in one site: ${peak}`],
  ];
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  for (const r of rows) console.log(r.map((c, i) => c.padEnd(widths[i])).join("  "));
  writeResults("rollout", {
    devices, sites: SITES, budget_per_site: BUDGET, baseline_s: baselineS, rollout_s: rolloutS, ratio: rolloutS / baselineS,
    status: done.status, succeeded: done.progress.counts.succeeded, max_in_flight_per_site: peak,
  });
  if (done.status !== "completed" || peak > BUDGET) {
    console.error(`FAILED: rollout ${done.status}, most in flight in one site ${peak} (budget ${BUDGET})`);
    process.exitCode = 1;
  }
} finally {
  await service.stop();
}
