// node bench/cost.mjs — what a device costs a month, over HTTP and over the device channel.
//
// Drives N devices per mode at the spec's cadence (heartbeat every 10 s, telemetry every 15 s, and
// over HTTP a command poll every 15 s), time compressed, against the BUILT bundle served by workerd on
// loopback, and counts what Cloudflare bills (bench/cost-entry.mjs does the counting): Worker requests,
// Durable Object requests (RPC and fetch from the Worker, incoming WebSocket messages, alarms), the
// hub's SQLite rows read and written and its storage, D1 rows read and written. It converts the counts
// to dollars per device per month with the list prices in bench/prices.mjs, beside AWS IoT Core and
// Azure IoT Hub for the same traffic. It prints ratios; it asserts nothing about time.
//
//   node bench/cost.mjs
//   BENCH_COST_DEVICES=20 BENCH_COST_SIM_S=600 BENCH_COST_COMPRESSION=10 node bench/cost.mjs
//   BENCH_SKIP_BUILD=1 node bench/cost.mjs      # serve the dist/ already built
import { execSync } from "node:child_process";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import WebSocket from "ws";
import { startService, ROOT } from "../scripts/lib/serve-bundle.mjs";
import { DEVICE_LIMIT, json, pool, writeResults } from "./lib.mjs";
import { AWS_IOT_CORE, AZURE_IOT_HUB, CHECKED, CLOUDFLARE } from "./prices.mjs";

const DEVICES = Number(process.env.BENCH_COST_DEVICES ?? 20);
/** Device time each mode covers, and how much faster than real time it runs. */
const SIM_S = Number(process.env.BENCH_COST_SIM_S ?? 1200);
const COMPRESSION = Number(process.env.BENCH_COST_COMPRESSION ?? 10);
const CADENCE_S = { heartbeat: 10, telemetry: 15, poll: 15 };
const MONTH_S = 30 * 86_400;
/**
 * Assumptions the bench cannot measure on loopback, named so they can be argued with:
 * the Worker's CPU time per request (workerd here does not report it), and how often a device on the
 * channel reconnects (each reconnect is one Worker request and one Durable Object request).
 */
const ASSUMED_WORKER_CPU_MS_PER_REQUEST = 1;
const ASSUMED_CHANNEL_RECONNECTS_PER_DAY = 24;

// Every device call passes the hub's per-device rate limit: a run that would cross it measures 429s.
{
  const realS = SIM_S / COMPRESSION;
  const callsPerDevice = SIM_S * (1 / CADENCE_S.heartbeat + 1 / CADENCE_S.telemetry + 1 / CADENCE_S.poll);
  const allowed = DEVICE_LIMIT.burst - 1 + DEVICE_LIMIT.perSecond * realS;
  if (callsPerDevice > allowed) {
    console.error(`BENCH_COST_COMPRESSION=${COMPRESSION} with BENCH_COST_SIM_S=${SIM_S} makes ${Math.round(callsPerDevice)} calls per device in ${realS} s; the device limit allows ${Math.floor(allowed)}. Compress less.`);
    process.exit(1);
  }
}

if (!process.env.BENCH_SKIP_BUILD) {
  console.log("building the bundle…");
  execSync("npm run build --silent", { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });
}

// The built bundle, served unchanged behind the counting entry module.
const work = mkdtempSync(join(tmpdir(), "fleet-cost-"));
copyFileSync(join(ROOT, "dist", "index.js"), join(work, "index.js"));
copyFileSync(join(ROOT, "bench", "cost-entry.mjs"), join(work, "entry.js"));
const service = await startService({
  quiet: true, assets: false, dist: work,
  miniflare: { scriptPath: join(work, "entry.js"), modulesRoot: work, modulesRules: [{ type: "ESModule", include: ["**/*.js"] }] },
});
const api = service.url;
const wsBase = api.replace(/^http/, "ws");

/** Metrics like the original emulator's: a base with noise and an occasional spike. */
function sampler(seed) {
  let s = seed;
  const random = () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648);
  const base = { cpu: 15 + random() * 20, mem: 40 + random() * 15, disk: 30 + random() * 15 };
  let tick = 0;
  return () => {
    tick++;
    const spike = tick % 20 === 0 ? 30 + random() * 25 : 0;
    const clamp = (v) => Math.max(0, Math.min(100, +v.toFixed(1)));
    return {
      cpu_usage: clamp(base.cpu + (random() - 0.5) * 16 + spike),
      memory_usage: clamp(base.mem + (random() - 0.5) * 6),
      disk_usage: clamp(base.disk + (random() - 0.5) * 3),
      network_latency_ms: +(3 + random() * 9).toFixed(1),
      uptime_seconds: tick * CADENCE_S.telemetry,
    };
  };
}

/**
 * What the set-up calls (site, registrations, channel upgrades) leave to be written after their
 * responses: the request log's batch (within 200 ms) and the request rollups (within 10 s). Waited
 * out before the counts are reset, or those one-off rows would land in the measured minutes and be
 * scaled up as if every minute wrote them.
 */
const SETUP_WRITES_SETTLE_MS = 11_000;
const settleSetupWrites = () => new Promise((resolve) => setTimeout(resolve, SETUP_WRITES_SETTLE_MS));

async function counts(sites, reset = false) {
  const res = await fetch(`${api}/__bench/${reset ? "reset" : "counts"}?sites=${sites.join(",")}`, { method: reset ? "POST" : "GET" });
  return res.json();
}

/** Runs `fire(kind, device)` for every device at the spec's cadence, compressed, for SIM_S device seconds. */
async function drive(devices, kinds, fire) {
  const realMs = (SIM_S / COMPRESSION) * 1000;
  const inFlight = new Set();
  const timers = [];
  const started = Date.now();
  for (const device of devices) {
    for (const kind of kinds) {
      const every = (CADENCE_S[kind] * 1000) / COMPRESSION;
      const phase = Math.random() * every;
      timers.push(setTimeout(function tick() {
        if (Date.now() - started >= realMs) return;
        const p = fire(kind, device).catch((error) => { device.errors.push(String(error)); });
        inFlight.add(p);
        p.finally(() => inFlight.delete(p));
        timers.push(setTimeout(tick, every));
      }, phase));
    }
  }
  await new Promise((resolve) => setTimeout(resolve, realMs));
  for (const t of timers) clearTimeout(t);
  await Promise.all([...inFlight]);
  return (Date.now() - started) / 1000;
}

const email = `bench-cost-${Date.now()}@example.com`;
const { data } = await json(`${api}/api/v1/auth/signup`, { method: "POST", body: JSON.stringify({ email, password: "bench-password" }) });
const auth = { Authorization: `Bearer ${data.access_token}` };

async function siteWithDevices(siteId) {
  await json(`${api}/api/v1/sites/sites`, { method: "POST", headers: auth, body: JSON.stringify({ site_id: siteId, name: `Cost ${siteId}` }) });
  return pool(Array.from({ length: DEVICES }, (_, i) => i), 4, async (i) => {
    const d = await json(`${api}/api/v1/devices/sites/${siteId}/devices`, { method: "POST", headers: auth, body: JSON.stringify({ name: `Till ${i}`, device_type: "pos_terminal" }) });
    const headers = { "X-Device-ID": d.device_id, "X-API-Key": d.api_key, "Content-Type": "application/json" };
    // Warm-up (not counted): the one bcrypt of the device's key, and the Worker learning its site.
    const warm = await fetch(`${api}/api/v1/agent/heartbeat`, { method: "POST", headers, body: "{}" });
    if (warm.status !== 200) throw new Error(`warm-up heartbeat: ${warm.status}`);
    return { id: d.device_id, headers, sample: sampler(i + 1), errors: [], calls: 0, rtt_ms: 0, statuses: {}, samples: 0, stored: 0 };
  });
}

const timed = async (device, call) => {
  const t = performance.now();
  const status = await call();
  device.rtt_ms += performance.now() - t;
  device.calls++;
  device.statuses[status] = (device.statuses[status] ?? 0) + 1;
};

async function httpMode() {
  const siteId = `COST-HTTP-${Date.now().toString(36)}`;
  const devices = await siteWithDevices(siteId);
  await settleSetupWrites();
  await counts([siteId], true);
  const paths = { heartbeat: "/api/v1/agent/heartbeat", telemetry: "/api/v1/agent/telemetry", poll: "/api/v1/devices/pending" };
  const realS = await drive(devices, ["heartbeat", "telemetry", "poll"], (kind, device) => timed(device, async () => {
    const init = kind === "poll" ? { headers: device.headers }
      : { method: "POST", headers: device.headers, body: JSON.stringify(kind === "telemetry" ? device.sample() : {}) };
    const res = await fetch(`${api}${paths[kind]}`, init);
    const body = await res.text();
    if (kind === "telemetry" && res.status === 200) {
      device.samples++;
      if (JSON.parse(body).stored) device.stored++;
    }
    return res.status;
  }));
  return { siteId, devices, realS, counts: await counts([siteId]) };
}

async function channelMode() {
  const siteId = `COST-CHANNEL-${Date.now().toString(36)}`;
  const devices = await siteWithDevices(siteId);
  // Sockets open before the count starts: a reconnect is priced from ASSUMED_CHANNEL_RECONNECTS_PER_DAY.
  await Promise.all(devices.map((device) => new Promise((resolve, reject) => {
    const ws = new WebSocket(`${wsBase}/api/v1/agent/channel`, { headers: device.headers });
    device.ws = ws;
    device.pending = new Map();
    let n = 0;
    device.nextId = () => `m${++n}`;
    ws.on("message", (raw) => {
      const message = JSON.parse(raw.toString());
      if (message.type === "hello") resolve();
      const done = message.ref && device.pending.get(message.ref);
      if (done) {
        device.pending.delete(message.ref);
        if (message.type === "telemetry.ok") {
          device.samples++;
          device.stored += message.stored_count;
        }
        done(message.type === "error" ? `error:${message.code}` : message.type);
      }
    });
    ws.once("unexpected-response", (_req, res) => reject(new Error(`channel refused: ${res.statusCode}`)));
    ws.once("error", reject);
  })));
  await settleSetupWrites();
  await counts([siteId], true);
  const realS = await drive(devices, ["heartbeat", "telemetry"], (kind, device) => timed(device, () => new Promise((resolve) => {
    const id = device.nextId();
    device.pending.set(id, resolve);
    device.ws.send(JSON.stringify(kind === "telemetry" ? { type: "telemetry", id, samples: [device.sample()] } : { type: "heartbeat", id }));
  })));
  const measured = await counts([siteId]);
  for (const device of devices) device.ws.close(1000, "bench over");
  return { siteId, devices, realS, counts: measured };
}

/**
 * Per device and month. Request and message counts scale with device time (SIM_S); what the hub does
 * on its own clock (alarms, the coalesced D1 flushes) scales with the real time the run took.
 */
function perDeviceMonth(run, mode) {
  const hub = run.counts.hubs[run.siteId];
  const bySim = MONTH_S / SIM_S / DEVICES;
  const byReal = MONTH_S / run.realS / DEVICES;
  const calls = run.devices.reduce((a, d) => a + d.calls, 0);
  const meanRttMs = calls ? run.devices.reduce((a, d) => a + d.rtt_ms, 0) / calls : 0;
  const reconnects = mode === "channel" ? ASSUMED_CHANNEL_RECONNECTS_PER_DAY * 30 : 0;
  const month = {
    worker_requests: run.counts.worker.requests * bySim + reconnects,
    do_rpc_requests: run.counts.worker.do_requests * bySim + reconnects,
    do_websocket_messages: hub.websocket_messages * bySim,
    do_alarms: hub.alarms * byReal,
    do_sql_rows_read: hub.sql_rows_read * bySim,
    do_sql_rows_written: hub.sql_rows_written * bySim,
    do_storage_gb: hub.storage_bytes / DEVICES / 1e9,
    d1_rows_read: (run.counts.worker.d1.rows_read + hub.d1.rows_read) * byReal,
    d1_rows_written: (run.counts.worker.d1.rows_written + hub.d1.rows_written) * byReal,
    d1_raw_queries: (run.counts.worker.d1.raw_queries + hub.d1.raw_queries) * bySim,
    mean_round_trip_ms: +meanRttMs.toFixed(2),
    /** Share of telemetry samples the delta rules stored (each stored sample writes history, state and a live event). */
    stored_sample_share: +(run.devices.reduce((a, x) => a + x.stored, 0) / Math.max(1, run.devices.reduce((a, x) => a + x.samples, 0))).toFixed(3),
  };
  const w = CLOUDFLARE.workers;
  const o = CLOUDFLARE.durable_objects;
  const d = CLOUDFLARE.d1;
  const billedDoRequests = month.do_rpc_requests + month.do_alarms + month.do_websocket_messages / o.websocket_messages_per_request;
  // Upper bound: every billed invocation keeps the hub busy for a device's whole round trip.
  const gbS = (month.do_rpc_requests + month.do_alarms + month.do_websocket_messages) * (meanRttMs / 1000) * o.memory_gb;
  const usd = {
    worker_requests: (month.worker_requests / 1e6) * w.request_usd_per_million,
    worker_cpu: ((month.worker_requests * ASSUMED_WORKER_CPU_MS_PER_REQUEST) / 1e6) * w.cpu_ms_usd_per_million,
    do_requests: (billedDoRequests / 1e6) * o.request_usd_per_million,
    do_duration: (gbS / 1e6) * o.duration_usd_per_million_gb_s,
    do_sql_rows: (month.do_sql_rows_read / 1e6) * o.sqlite_rows_read_usd_per_million + (month.do_sql_rows_written / 1e6) * o.sqlite_rows_written_usd_per_million,
    do_storage: month.do_storage_gb * o.storage_usd_per_gb_month,
    d1_rows: (month.d1_rows_read / 1e6) * d.rows_read_usd_per_million + (month.d1_rows_written / 1e6) * d.rows_written_usd_per_million,
  };
  const total = Object.values(usd).reduce((a, b) => a + b, 0);
  // What the transport decides: the same hub methods run either way, so the hub's own SQLite and D1
  // work is (nearly) the same in both modes, and the difference between them is all in these.
  const transport = usd.worker_requests + usd.worker_cpu + usd.do_requests + usd.do_duration;
  const statuses = {};
  for (const device of run.devices) for (const [k, v] of Object.entries(device.statuses)) statuses[k] = (statuses[k] ?? 0) + v;
  return { month, billed_do_requests: billedDoRequests, usd, total_usd: total, transport_usd: transport, storage_bytes_per_device: Math.round(hub.storage_bytes / DEVICES), statuses, errors: run.devices.flatMap((x) => x.errors).slice(0, 5) };
}

/** The same device traffic on the other platforms (device-to-cloud messages: heartbeats and telemetry). */
function otherPlatforms() {
  const messages = MONTH_S / CADENCE_S.heartbeat + MONTH_S / CADENCE_S.telemetry;
  const a = AWS_IOT_CORE;
  const aws = (MONTH_S / 60 / 1e6) * a.connectivity_usd_per_million_minutes
    + (messages / 1e6) * (a.messages_usd_per_million + a.rules_triggered_usd_per_million + a.rule_actions_usd_per_million);
  const perDay = messages / 30;
  const azure = Object.fromEntries(AZURE_IOT_HUB.tiers.map((t) => [t.name, t.usd_per_unit_month / (t.messages_per_unit_day / perDay)]));
  return { messages_per_month: messages, aws_iot_core_usd: aws, azure_iot_hub_usd: azure };
}

const $ = (v) => `$${v < 0.01 ? v.toFixed(5) : v.toFixed(4)}`;
const n = (v) => Math.round(v).toLocaleString("en-US");

try {
  console.log(`cost bench: ${DEVICES} devices per mode, ${SIM_S} s of device time at ${COMPRESSION}× (≈${Math.round(SIM_S / COMPRESSION)} s real each)`);
  const http = perDeviceMonth(await httpMode(), "http");
  const channel = perDeviceMonth(await channelMode(), "channel");
  const others = otherPlatforms();

  const rows = [
    ["Worker requests", n(http.month.worker_requests), n(channel.month.worker_requests)],
    ["DO requests (RPC/fetch)", n(http.month.do_rpc_requests), n(channel.month.do_rpc_requests)],
    ["DO WebSocket messages in", n(http.month.do_websocket_messages), n(channel.month.do_websocket_messages)],
    ["DO alarms", n(http.month.do_alarms), n(channel.month.do_alarms)],
    ["DO billed requests", n(http.billed_do_requests), n(channel.billed_do_requests)],
    ["DO SQLite rows read", n(http.month.do_sql_rows_read), n(channel.month.do_sql_rows_read)],
    ["DO SQLite rows written", n(http.month.do_sql_rows_written), n(channel.month.do_sql_rows_written)],
    ["D1 rows read", n(http.month.d1_rows_read), n(channel.month.d1_rows_read)],
    ["D1 rows written", n(http.month.d1_rows_written), n(channel.month.d1_rows_written)],
    ["DO storage (bytes/device)", n(http.storage_bytes_per_device), n(channel.storage_bytes_per_device)],
    ["mean round trip (ms)", http.month.mean_round_trip_ms, channel.month.mean_round_trip_ms],
    ["telemetry samples stored", http.month.stored_sample_share, channel.month.stored_sample_share],
    ...Object.keys(http.usd).map((k) => [`$ ${k}`, $(http.usd[k]), $(channel.usd[k])]),
    ["$ transport (Worker + DO requests/duration)", $(http.transport_usd), $(channel.transport_usd)],
    ["$ TOTAL per device-month", $(http.total_usd), $(channel.total_usd)],
  ];
  const width = Math.max(...rows.map((r) => r[0].length));
  console.log(`\nper device per month (30 days), Cloudflare list prices as published, checked ${CHECKED}; verify before budgeting`);
  console.log(`${"".padEnd(width)}  ${"HTTP".padStart(14)}  ${"channel".padStart(14)}`);
  for (const [label, a, b] of rows) console.log(`${label.padEnd(width)}  ${String(a).padStart(14)}  ${String(b).padStart(14)}`);
  console.log(`\nsame traffic elsewhere (${n(others.messages_per_month)} device-to-cloud messages a month):`);
  console.log(`  AWS IoT Core (${AWS_IOT_CORE.region}, ${AWS_IOT_CORE.tier}): ${$(others.aws_iot_core_usd)}`);
  for (const [tier, usd] of Object.entries(others.azure_iot_hub_usd)) console.log(`  Azure IoT Hub ${tier} (units filled exactly): ${$(usd)}`);
  const ratios = {
    channel_over_http: channel.total_usd / http.total_usd,
    transport_channel_over_http: channel.transport_usd / http.transport_usd,
    http_over_aws: http.total_usd / others.aws_iot_core_usd,
    channel_over_aws: channel.total_usd / others.aws_iot_core_usd,
  };
  console.log(`\nratios: channel / HTTP = ${ratios.channel_over_http.toFixed(3)} in all, ${ratios.transport_channel_over_http.toFixed(3)} for the transport (goal ≤ 0.1); HTTP / AWS IoT Core = ${ratios.http_over_aws.toFixed(3)}; channel / AWS IoT Core = ${ratios.channel_over_aws.toFixed(3)} (goal < 1 for both)`);
  const notOk = (r) => Object.entries(r.statuses).filter(([s]) => !["200", "heartbeat.ok", "telemetry.ok"].includes(s));
  for (const [name, r] of [["HTTP", http], ["channel", channel]]) {
    if (notOk(r).length || r.errors.length) console.warn(`⚠ ${name}: answers other than success ${JSON.stringify(Object.fromEntries(notOk(r)))} ${r.errors.join("; ")}`);
  }
  writeResults("cost", {
    devices_per_mode: DEVICES, simulated_s: SIM_S, compression: COMPRESSION, prices_checked: CHECKED,
    assumptions: { worker_cpu_ms_per_request: ASSUMED_WORKER_CPU_MS_PER_REQUEST, channel_reconnects_per_day: ASSUMED_CHANNEL_RECONNECTS_PER_DAY },
    http, channel, others, ratios,
  });
} finally {
  await service.stop();
  rmSync(work, { recursive: true, force: true });
}
