// npm run bench — the device hot path against a bare-runtime baseline, on the built bundle served
// by workerd through Miniflare (not `wrangler dev`). Prints one table and writes bench/results.json.
// Each device scenario rotates over its own devices, as many as keep every device under its rate
// limit at the fastest rate the app could reach (devicesFor); a scenario with more than 1 % answers
// other than 200 fails the run (non-zero exit).
//
//   BENCH_DURATION=10 BENCH_CONNECTIONS=32 npm run bench
//   BENCH_DEVICES=2000 npm run bench        # at least this many devices per device scenario
import { execSync } from "node:child_process";
import { startService, ROOT } from "../scripts/lib/serve-bundle.mjs";
import { assertScenarios, CONNECTIONS, devicesFor, DURATION_S, json, load, pool, printTable, startBaseline, writeResults } from "./lib.mjs";

const SITES = 10;

console.log("building the bundle…");
execSync("npm run build --silent", { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });

const baseline = await startBaseline();
// Static assets off: on Cloudflare the asset lookup is part of the platform in front of the Worker,
// while Miniflare emulates it with an extra JavaScript worker hop on every request, which alone costs
// the bare baseline ~70 % of its throughput. None of the measured paths serves an asset.
const service = await startService({ quiet: true, assets: false });
const api = service.url;

try {
  const rows = [];
  console.log(`measuring: ${DURATION_S} s per scenario, ${CONNECTIONS} connections`);
  const base = await load("baseline (bare Worker, no-op)", { url: baseline.url });
  rows.push(base);
  // Reference points: the whole app with no I/O, one D1 query, and one D1 query plus one Durable
  // Object round trip (a steady heartbeat is one Durable Object round trip and no D1 query).
  const noIo = { ...(await load("ref: app, no I/O (GET /version)", { url: `${api}/version` })), notes: "middleware + routing only" };
  rows.push(noIo);
  rows.push({ ...(await load("ref: one D1 query (GET /health)", { url: `${api}/health` })), notes: "SELECT 1" });
  rows.push({ ...(await load("ref: D1 query + DO round trip", { url: `${api}/api/v1/health/status` })), notes: "SELECT 1 + SiteHub ping" });

  // No route of the app can outrun the app doing nothing: that rate sizes the device rotation.
  const perScenario = Math.max(devicesFor(noIo.requests_per_s, DURATION_S), Number(process.env.BENCH_DEVICES ?? 0));
  const DEVICES = 2 * perScenario;
  console.log(`registering ${DEVICES} devices across ${SITES} sites, ${perScenario} per device scenario (bcrypt-hashes each key; takes a while)…`);
  const email = `bench-${Date.now()}@example.com`;
  const { data } = await json(`${api}/api/v1/auth/signup`, { method: "POST", body: JSON.stringify({ email, password: "bench-password" }) });
  const auth = { Authorization: `Bearer ${data.access_token}` };
  const sites = [];
  for (let i = 0; i < SITES; i++) {
    const site = await json(`${api}/api/v1/sites/sites`, { method: "POST", headers: auth, body: JSON.stringify({ site_id: `BENCH-${i}`, name: `Bench store ${i}` }) });
    sites.push(site.site_id);
  }
  const started = Date.now();
  const devices = await pool(Array.from({ length: DEVICES }, (_, i) => i), 8, async (i) => {
    const siteId = sites[i % SITES];
    const d = await json(`${api}/api/v1/devices/sites/${siteId}/devices`, {
      method: "POST", headers: auth, body: JSON.stringify({ device_id: `BENCH-POS-${i}`, name: `Till ${i}`, device_type: "pos_terminal" }),
    });
    return { id: d.device_id, key: d.api_key, site: siteId };
  });
  console.log(`  done in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  // Disjoint halves, both spread over every site: one scenario's calls never spend another's tokens.
  const heartbeatDevices = devices.slice(0, perScenario);
  const telemetryDevices = devices.slice(perScenario);

  const rotating = (path, fleet, body) => {
    let i = 0;
    let bcrypt = 0;
    return {
      counter: () => bcrypt,
      requests: [{
        method: "POST",
        path,
        setupRequest: (req) => {
          const d = fleet[i++ % fleet.length];
          return { ...req, headers: { "content-type": "application/json", "x-device-id": d.id, "x-api-key": d.key }, body: JSON.stringify(body(i)) };
        },
        onResponse: (_status, _body, _context, headers) => {
          if (String(headers["server-timing"] ?? "").includes('desc="bcrypt"')) bcrypt++;
        },
      }],
    };
  };

  // One call per device first, as a running fleet has made: each site hub loads the device's
  // credential from D1 once and learns its key, so the scenarios measure the steady state.
  await pool(devices, 16, async (d) => {
    await fetch(`${api}/api/v1/agent/heartbeat`, {
      method: "POST", headers: { "content-type": "application/json", "x-device-id": d.id, "x-api-key": d.key }, body: "{}",
    }).then((r) => r.text());
  });

  const hb = rotating("/api/v1/agent/heartbeat", heartbeatDevices, () => ({ heartbeat_interval_s: 10 }));
  const hbStart = Date.now();
  const heartbeat = await load(`heartbeat (rotating over ${heartbeatDevices.length} devices)`, { url: api, requests: hb.requests });
  const minutes = (Date.now() - hbStart) / 60_000;
  heartbeat.devices = heartbeatDevices.length;
  heartbeat.bcrypt_verifications = hb.counter();
  heartbeat.bcrypt_per_device_per_minute = +(hb.counter() / heartbeatDevices.length / minutes).toFixed(3);
  heartbeat.notes = `bcrypt: ${hb.counter()} (${heartbeat.bcrypt_per_device_per_minute}/device/min)`;
  rows.push(heartbeat);

  const tm = rotating("/api/v1/agent/telemetry", telemetryDevices, (i) => ({ cpu_usage: 30 + (i % 7), memory_usage: 55, disk_usage: 61, network_latency_ms: 18, uptime_seconds: 1000 + i }));
  const telemetry = await load(`telemetry (rotating over ${telemetryDevices.length} devices)`, { url: api, requests: tm.requests });
  telemetry.devices = telemetryDevices.length;
  telemetry.bcrypt_verifications = tm.counter();
  telemetry.notes = `bcrypt: ${tm.counter()}`;
  rows.push(telemetry);

  const perSite = Math.ceil(DEVICES / SITES);
  const list = await load(`device list of a ${perSite}-device site`, { url: `${api}/api/v1/devices/sites/${sites[0]}/devices`, headers: auth });
  rows.push(list);

  for (const r of rows) r.ratio_to_baseline = +(r.requests_per_s / base.requests_per_s).toFixed(3);
  console.log();
  printTable(rows, base.requests_per_s);
  const valid = assertScenarios(rows);
  const goals = {
    heartbeat_ratio_goal: 0.5,
    heartbeat_ratio: heartbeat.ratio_to_baseline,
    heartbeat_ratio_met: heartbeat.ratio_to_baseline >= 0.5,
    bcrypt_per_device_per_minute_goal: 1,
    bcrypt_per_device_per_minute: heartbeat.bcrypt_per_device_per_minute,
    bcrypt_goal_met: heartbeat.bcrypt_per_device_per_minute <= 1,
  };
  console.log();
  console.log(`goals: heartbeat ≥ 50 % of baseline → ${(heartbeat.ratio_to_baseline * 100).toFixed(1)} % ${goals.heartbeat_ratio_met ? "met" : "NOT met"}; ` +
    `bcrypt ≤ 1/device/min → ${heartbeat.bcrypt_per_device_per_minute} ${goals.bcrypt_goal_met ? "met" : "NOT met"}`);
  writeResults("hot_path", { devices: DEVICES, devices_per_scenario: perScenario, sites: SITES, valid, scenarios: rows, goals });
} finally {
  await service.stop();
  await baseline.stop();
}
