// node bench/live-fanout.mjs — fan-out cost of the site's live channel, on the built bundle served by
// workerd (Miniflare, scripts/lib/serve-bundle.mjs). One site, BENCH_SUBSCRIBERS (default 500) WebSocket
// subscribers held by the site's hub; real devices change status BENCH_CHANGES times in all (heartbeats
// alternating `status: "error"` and online, rotating over enough devices to stay under the per-device
// rate limit, devicesFor). For every change and every subscriber it measures the
// delivery delay of the `device.status` event: from the moment the device's heartbeat is sent until the
// subscriber has the message. Reports p50/p99/max for 500 subscribers against the same run with one
// subscriber (the baseline that cancels out the machine), plus the spread of one broadcast (last − first
// arrival). A heartbeat answered with anything but 200 stops the run, and more than 1 % of deliveries
// lost fails it (non-zero exit). Merges section "live_fanout" into bench/results.json.
//
//   BENCH_SUBSCRIBERS=500 BENCH_CHANGES=30 node bench/live-fanout.mjs
//   BENCH_SKIP_BUILD=1 node bench/live-fanout.mjs     # serve the dist/ already built
import { execSync } from "node:child_process";
import WebSocket from "ws";
import { startService, ROOT } from "../scripts/lib/serve-bundle.mjs";
import { devicesFor, json, MAX_NOT_OK_SHARE, pool, writeResults } from "./lib.mjs";

const SUBSCRIBERS = Number(process.env.BENCH_SUBSCRIBERS ?? 500);
const CHANGES = Number(process.env.BENCH_CHANGES ?? 30);
/** The one-subscriber baseline runs more changes: its p99 would otherwise be a single sample's. */
const BASELINE_CHANGES = Math.max(CHANGES, 100);
const TIMEOUT_MS = 15_000;
/** Each change waits for its delivery and then this long: at most 1000 / PAUSE_MS changes a second. */
const PAUSE_MS = 100;

if (!process.env.BENCH_SKIP_BUILD) {
  console.log("building the bundle…");
  execSync("npm run build --silent", { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });
}

const now = () => performance.timeOrigin + performance.now();
const percentile = (sorted, p) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] : 0);
const round = (v) => Math.round(v * 10) / 10;

// Static assets off, as in bench/run.mjs: Miniflare emulates the platform's asset lookup with an extra worker hop.
// One user holds every subscriber here, far past the per-user cap a real deployment keeps (default 10).
const service = await startService({
  quiet: true,
  assets: false,
  bindings: { LIVE_MAX_SUBSCRIPTIONS_PER_USER: String(SUBSCRIBERS), LIVE_MAX_SUBSCRIPTIONS_PER_SITE: String(Math.max(SUBSCRIBERS, 1000)) },
});
const api = service.url;
const wsApi = api.replace(/^http/, "ws");

/** Opens `count` subscribers; each records when every device.status event arrived. */
async function openSubscribers(siteId, token, count) {
  const subscribers = await pool(Array.from({ length: count }, (_, i) => i), 50, () => new Promise((resolve, reject) => {
    const ws = new WebSocket(`${wsApi}/api/v1/sites/${siteId}/ws`, { headers: { authorization: `Bearer ${token}` } });
    const sub = { ws, arrivals: new Map(), messages: 0, heartbeats: 0 };
    ws.on("message", (data) => {
      const at = now();
      sub.messages++;
      const event = JSON.parse(data.toString());
      if (event.type === "device.status") sub.arrivals.set(event.seq, at);
      if (event.type === "device.heartbeat") sub.heartbeats++;
    });
    ws.once("open", () => resolve(sub));
    ws.once("unexpected-response", (_req, res) => reject(new Error(`subscription refused: ${res.statusCode}`)));
    ws.once("error", reject);
  }));
  return subscribers;
}

async function closeAll(subscribers) {
  await Promise.all(subscribers.map((s) => new Promise((resolve) => {
    if (s.ws.readyState === WebSocket.CLOSED) return resolve();
    s.ws.once("close", resolve);
    s.ws.close(1000, "bench done");
    setTimeout(() => { s.ws.terminate(); resolve(); }, 2000);
  })));
}

/** One scenario: `count` subscribers on a fresh site, `changes` status changes (heartbeats alternating error/online). */
async function scenario(token, count, changes) {
  const siteId = `BENCH-LIVE-${count}-${Date.now().toString(36)}`;
  await json(`${api}/api/v1/sites/sites`, { method: "POST", headers: { Authorization: `Bearer ${token}` }, body: JSON.stringify({ site_id: siteId, name: `Live fan-out ${count}` }) });
  // The changes rotate over enough devices to keep each under its rate limit at the fastest pace possible.
  const maxRate = 1000 / PAUSE_MS;
  const devices = await pool(Array.from({ length: devicesFor(maxRate, changes / maxRate) }, (_, i) => i), 4, async (i) => {
    const d = await json(`${api}/api/v1/devices/sites/${siteId}/devices`, {
      method: "POST", headers: { Authorization: `Bearer ${token}` }, body: JSON.stringify({ name: `Till ${i}`, device_type: "pos_terminal" }),
    });
    const headers = { "x-device-id": d.device_id, "x-api-key": d.api_key };
    return { beat: (status) => json(`${api}/api/v1/agent/heartbeat`, { method: "POST", headers, body: JSON.stringify(status ? { status } : {}) }), inError: false };
  });
  for (const d of devices) await d.beat(); // online before anyone watches; warms the key cache

  const connectStarted = now();
  const subscribers = await openSubscribers(siteId, token, count);
  const connectMs = now() - connectStarted;

  const delays = [];
  const spreads = [];
  let lost = 0;
  let lastSeq = 0;
  const changesStarted = now();
  for (let i = 0; i < changes; i++) {
    const device = devices[i % devices.length];
    const expected = device.inError ? "online" : "error";
    const sentAt = now();
    const result = await device.beat(device.inError ? undefined : "error");
    device.inError = !device.inError;
    if (result.device_status !== expected) throw new Error(`heartbeat answered ${result.device_status}, expected ${expected}`);
    // The seq of this change: the newest device.status seen by the first subscriber that has it.
    const deadline = now() + TIMEOUT_MS;
    let seq;
    while (now() < deadline) {
      const seqs = subscribers.flatMap((s) => [...s.arrivals.keys()]);
      const newest = seqs.length ? Math.max(...seqs) : undefined;
      if (newest !== undefined && subscribers.every((s) => s.arrivals.has(newest)) && newest > lastSeq) {
        seq = newest;
        break;
      }
      await new Promise((r) => setTimeout(r, 2));
    }
    if (seq === undefined) {
      lost += subscribers.length;
      continue;
    }
    lastSeq = seq;
    const arrivals = subscribers.map((s) => s.arrivals.get(seq));
    for (const at of arrivals) delays.push(at - sentAt);
    spreads.push(Math.max(...arrivals) - Math.min(...arrivals));
    await new Promise((r) => setTimeout(r, PAUSE_MS));
  }
  const elapsedS = (now() - changesStarted) / 1000;
  const sorted = delays.slice().sort((a, b) => a - b);
  const spreadSorted = spreads.slice().sort((a, b) => a - b);
  const messages = subscribers.reduce((n, s) => n + s.messages, 0) / subscribers.length;
  const heartbeats = subscribers.reduce((n, s) => n + s.heartbeats, 0) / subscribers.length;
  const live = await json(`${api}/api/v1/sites/${siteId}/ws`, { headers: { Authorization: `Bearer ${token}` } });
  await closeAll(subscribers);
  return {
    subscribers: count,
    changes,
    deliveries: delays.length,
    lost,
    connect_all_ms: Math.round(connectMs),
    p50_ms: round(percentile(sorted, 50)),
    p99_ms: round(percentile(sorted, 99)),
    max_ms: round(sorted.at(-1) ?? 0),
    broadcast_spread_p50_ms: round(percentile(spreadSorted, 50)),
    broadcast_spread_p99_ms: round(percentile(spreadSorted, 99)),
    messages_per_subscriber: round(messages),
    heartbeat_events_per_subscriber: round(heartbeats),
    heartbeat_events_per_s: round(heartbeats / elapsedS),
    hub_counted_subscribers: live.subscribers,
  };
}

try {
  const email = `bench-live-${Date.now()}@example.com`;
  const { data } = await json(`${api}/api/v1/auth/signup`, { method: "POST", body: JSON.stringify({ email, password: "bench-password" }) });
  const token = data.access_token;

  console.log(`baseline: 1 subscriber, ${BASELINE_CHANGES} status changes…`);
  const one = await scenario(token, 1, BASELINE_CHANGES);
  console.log(`fan-out: ${SUBSCRIBERS} subscribers, ${CHANGES} status changes…`);
  const many = await scenario(token, SUBSCRIBERS, CHANGES);

  const rows = [one, many].map((r) => ({ ...r, p99_ratio_to_one_subscriber: round(r.p99_ms / Math.max(one.p99_ms, 0.1)) }));
  const header = ["subscribers", "deliveries", "lost", "p50 ms", "p99 ms", "max ms", "spread p99 ms", "p99 ratio to 1", "connect all ms", "hb events/s"];
  const lines = rows.map((r) => [r.subscribers, r.deliveries, r.lost, r.p50_ms, r.p99_ms, r.max_ms, r.broadcast_spread_p99_ms, r.p99_ratio_to_one_subscriber, r.connect_all_ms, r.heartbeat_events_per_s].map(String));
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
  const fmt = (cells) => cells.map((c, i) => c.padEnd(widths[i])).join("  ");
  console.log(fmt(header));
  console.log(widths.map((w) => "-".repeat(w)).join("  "));
  for (const l of lines) console.log(fmt(l));
  console.log(`\ndelivery delay = heartbeat sent → device.status received, per subscriber; ${SUBSCRIBERS} subscribers p99 ${many.p99_ms} ms (${rows[1].p99_ratio_to_one_subscriber}× one subscriber's ${one.p99_ms} ms)`);
  const lossy = rows.filter((r) => r.lost / Math.max(1, r.lost + r.deliveries) > MAX_NOT_OK_SHARE);
  for (const r of lossy) console.error(`✖ ${r.subscribers} subscriber(s): ${r.lost} of ${r.lost + r.deliveries} deliveries lost`);
  if (lossy.length) process.exitCode = 1;
  writeResults("live_fanout", {
    description: "Delivery delay of a device.status change (heartbeat sent → message received) to every WebSocket subscriber of one site",
    valid: lossy.length === 0,
    scenarios: rows,
  });
} finally {
  await service.stop();
}
