// node bench/commands.mjs — the device command queue on the built bundle served by workerd (Miniflare),
// against the same bare-runtime baseline as bench/run.mjs. Two scenarios:
//   1. command poll with an empty queue (GET /api/v1/devices/pending), rotating over many devices;
//      also checks that it wrote nothing to D1 (audit, command index, request log row counts);
//   2. the full round trip: operator queues (POST /api/v1/devices/{id}/commands), the device polls,
//      acknowledges and reports the result — four HTTP calls, measured end to end.
// Each scenario has its own devices, as many as keep every device under its rate limit at the fastest
// rate the app could reach (devicesFor); one with more than 1 % failed answers fails the run (non-zero
// exit). Prints one table and merges section "commands" into bench/results.json.
//
//   BENCH_DURATION=10 BENCH_CONNECTIONS=32 node bench/commands.mjs
//   BENCH_COMMAND_DEVICES=2000 node bench/commands.mjs   # at least this many devices per scenario
//   BENCH_SKIP_BUILD=1 node bench/commands.mjs     # serve the dist/ already built
import { execSync } from "node:child_process";
import { startService, ROOT } from "../scripts/lib/serve-bundle.mjs";
import {
  assertScenarios, CONNECTIONS, devicesFor, DURATION_S, json, load, pool, printTable, startBaseline, writeResults,
} from "./lib.mjs";

const ROUND_TRIP_WORKERS = Math.max(1, Math.min(CONNECTIONS, Number(process.env.BENCH_ROUND_TRIP_WORKERS ?? 16)));

if (!process.env.BENCH_SKIP_BUILD) {
  console.log("building the bundle…");
  execSync("npm run build --silent", { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });
}

const baseline = await startBaseline();
// Static assets off, as in bench/run.mjs: Miniflare emulates the platform's asset lookup with an extra worker hop.
const service = await startService({ quiet: true, assets: false });
const api = service.url;
const d1 = await service.mf.getD1Database("DB");

const percentile = (sorted, p) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : 0);

async function d1Rows() {
  const count = async (table) => (await d1.prepare(`SELECT count(*) AS n FROM ${table}`).first()).n;
  return { audit_logs: await count("audit_logs"), command_index: await count("command_index"), api_request_logs: await count("api_request_logs") };
}

try {
  const rows = [];
  console.log(`measuring: ${DURATION_S} s per scenario, ${CONNECTIONS} connections`);
  const base = await load("baseline (bare Worker, no-op)", { url: baseline.url });
  rows.push(base);
  const noIo = { ...(await load("ref: app, no I/O (GET /version)", { url: `${api}/version` })), notes: "sizes the device rotation" };
  rows.push(noIo);

  // No route of the app can outrun the app doing nothing. The poll is one device call per request; a
  // round trip makes three device calls (poll, ack, result) out of four.
  const atLeast = Number(process.env.BENCH_COMMAND_DEVICES ?? 0);
  const pollDevices = Math.max(devicesFor(noIo.requests_per_s, DURATION_S), atLeast);
  const roundTripDevices = Math.max(devicesFor((noIo.requests_per_s * 3) / 4, DURATION_S), ROUND_TRIP_WORKERS, atLeast);
  const DEVICES = pollDevices + roundTripDevices;

  const email = `bench-commands-${Date.now()}@example.com`;
  const { data } = await json(`${api}/api/v1/auth/signup`, { method: "POST", body: JSON.stringify({ email, password: "bench-password" }) });
  const auth = { Authorization: `Bearer ${data.access_token}`, "Content-Type": "application/json" };
  const site = await json(`${api}/api/v1/sites/sites`, { method: "POST", headers: auth, body: JSON.stringify({ site_id: "BENCH-CMD", name: "Bench commands store" }) });
  console.log(`registering ${DEVICES} devices: ${pollDevices} to poll, ${roundTripDevices} for round trips (bcrypt-hashes each key; takes a while)…`);
  const devices = await pool(Array.from({ length: DEVICES }, (_, i) => i), 8, async (i) => {
    const d = await json(`${api}/api/v1/devices/sites/${site.site_id}/devices`, {
      method: "POST", headers: auth, body: JSON.stringify({ device_id: `BENCH-CMD-${i}`, name: `Till ${i}`, device_type: "pos_terminal" }),
    });
    return { id: d.device_id, key: d.api_key };
  });
  const pollers = devices.slice(0, pollDevices);
  const roundTrippers = devices.slice(pollDevices);
  const deviceHeaders = (d) => ({ "x-device-id": d.id, "x-api-key": d.key });

  // Warm the per-isolate key cache once per device, so the scenario measures the steady state.
  await pool(devices, 16, async (d) => { await fetch(`${api}/api/v1/devices/pending`, { headers: deviceHeaders(d) }).then((r) => r.text()); });

  const before = await d1Rows();
  let i = 0;
  let bcrypt = 0;
  const empty = await load(`command poll, empty queue (rotating over ${pollers.length} devices)`, {
    url: api,
    requests: [{
      method: "GET",
      path: "/api/v1/devices/pending",
      setupRequest: (req) => ({ ...req, headers: deviceHeaders(pollers[i++ % pollers.length]) }),
      onResponse: (_status, _body, _context, headers) => {
        if (String(headers["server-timing"] ?? "").includes('desc="bcrypt"')) bcrypt++;
      },
    }],
  });
  empty.devices = pollers.length;
  const after = await d1Rows();
  const d1Written = Object.fromEntries(Object.keys(before).map((k) => [k, after[k] - before[k]]));
  empty.d1_rows_written = d1Written;
  empty.notes = `bcrypt: ${bcrypt}; D1 rows written: ${Object.values(d1Written).reduce((a, b) => a + b, 0)}`;
  rows.push(empty);

  // Round trip: each worker owns a disjoint slice of its devices, so a poll only finds its own command.
  const latencies = [];
  let failures = 0;
  const until = Date.now() + DURATION_S * 1000;
  const started = Date.now();
  await Promise.all(Array.from({ length: ROUND_TRIP_WORKERS }, async (_, w) => {
    const mine = roundTrippers.filter((_, k) => k % ROUND_TRIP_WORKERS === w);
    let n = 0;
    while (Date.now() < until) {
      const d = mine[n++ % mine.length];
      const t0 = performance.now();
      try {
        const queued = await json(`${api}/api/v1/devices/${d.id}/commands`, { method: "POST", headers: auth, body: JSON.stringify({ command_type: "ping", payload: { n } }) });
        const polled = await json(`${api}/api/v1/devices/pending`, { headers: deviceHeaders(d) });
        if (!polled.commands.some((c) => c.command_id === queued.command_id)) throw new Error("queued command not delivered");
        await json(`${api}/api/v1/commands/${queued.command_id}/ack`, { method: "POST", headers: deviceHeaders(d) });
        const done = await json(`${api}/api/v1/commands/${queued.command_id}/status`, {
          method: "PUT", headers: deviceHeaders(d), body: JSON.stringify({ status: "completed", result: { latency_ms: 12 } }),
        });
        if (done.status !== "completed") throw new Error(`unexpected status ${done.status}`);
        latencies.push(performance.now() - t0);
      } catch (error) {
        failures++;
        if (failures <= 3) console.warn(`round trip failed: ${error.message}`);
      }
    }
  }));
  const seconds = (Date.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  const roundTrips = latencies.length / seconds;
  const attempts = latencies.length + failures;
  rows.push({
    name: `queue + poll + ack + result round trip (${ROUND_TRIP_WORKERS} concurrent, ${roundTrippers.length} devices)`,
    success_status: "a completed round trip",
    requests_per_s: Math.round(roundTrips * 4),
    p50_ms: +percentile(latencies, 50).toFixed(1),
    p99_ms: +percentile(latencies, 99).toFixed(1),
    total: attempts,
    ok: latencies.length,
    not_ok: failures ? { failed: failures } : {},
    errors: 0,
    not_ok_share: attempts ? +(failures / attempts).toFixed(4) : 1,
    devices: roundTrippers.length,
    round_trips_per_s: +roundTrips.toFixed(1),
    notes: `${roundTrips.toFixed(1)} round trips/s (4 calls each); p50/p99 are per round trip`,
  });

  for (const r of rows) r.ratio_to_baseline = +(r.requests_per_s / base.requests_per_s).toFixed(3);
  console.log();
  printTable(rows, base.requests_per_s);
  const valid = assertScenarios(rows);
  const goals = {
    empty_poll_d1_rows_written: Object.values(d1Written).reduce((a, b) => a + b, 0),
    empty_poll_writes_nothing: Object.values(d1Written).every((n) => n === 0),
  };
  console.log();
  console.log(`empty polls wrote ${goals.empty_poll_d1_rows_written} D1 rows → ${goals.empty_poll_writes_nothing ? "met" : "NOT met"} (goal: none)`);
  writeResults("commands", { devices: DEVICES, round_trip_workers: ROUND_TRIP_WORKERS, valid, scenarios: rows, goals });
} finally {
  await service.stop();
  await baseline.stop();
}
