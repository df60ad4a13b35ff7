// node bench/credential-stuffing.mjs — what a credential-stuffing attack costs everyone else, on the
// built bundle served by workerd (Miniflare). A probe measures GET /health and steady heartbeats
// (p50/p99, 50 requests/s each, sent evenly by `paced` from processes of their own, at the Worker's
// own socket as a deployment serves it): with the service idle; while 16 connections flood the
// cheapest route (GET /version) as fast as they can, for reference; and while 16 connections send
// heartbeats with made-up keys for real device ids as fast as they are answered, from one attacker
// address — its first 5 s on their own, then 10 s more. Every wrong key for a known device would
// cost a bcrypt; the credential throttles (docs/security.md) refuse all but the first few with 429
// before one runs. Ratios are to the worse of two idle windows, one before and one after the floods
// (the machine is shared). Prints one table and merges section "credential_stuffing" into
// bench/results.json.
//
//   BENCH_DURATION=10 BENCH_ATTACK_CONNECTIONS=16 node bench/credential-stuffing.mjs
//   BENCH_SKIP_BUILD=1 node bench/credential-stuffing.mjs     # serve the dist/ already built
import { execSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import autocannon from "autocannon";
import { startService, ROOT } from "../scripts/lib/serve-bundle.mjs";
import { DURATION_S, json, paced, pool, printTable, writeResults } from "./lib.mjs";

const DEVICES = Number(process.env.BENCH_STUFFING_DEVICES ?? 50);
const ATTACK_CONNECTIONS = Number(process.env.BENCH_ATTACK_CONNECTIONS ?? 16);
/** The probe's pace: a steady trickle, like a monitor and a store's tills, not a load of its own. */
const PROBE_RATE = Number(process.env.BENCH_PROBE_RATE ?? 50);
const ATTACKER = "203.0.113.66";
/** The attack's opening, measured on its own: its first wrong keys per address are still checked. */
const OPENING_S = 5;

if (!process.env.BENCH_SKIP_BUILD) {
  console.log("building the bundle…");
  execSync("npm run build --silent", { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });
}

// Everything at the Worker's own socket: Miniflare's development entry worker, which a deployment
// does not have, adds stalls of its own under load (bench/lib.mjs, `paced`).
const service = await startService({ quiet: true, assets: false, direct: true });
const api = service.directUrl;

/** Runs autocannon and resolves to its result (latencies in ms, status counts). */
const cannon = (options) => autocannon({ duration: DURATION_S, ...options });

/** A row for an autocannon result (the floods). */
const summary = (name, result, notes = "") => ({
  name,
  requests_per_s: Math.round(result.requests.average),
  p50_ms: result.latency.p50,
  p99_ms: result.latency.p99,
  total: result.requests.total,
  non_2xx: result.non2xx ?? 0,
  errors: result.errors + result.timeouts,
  notes,
});

/** A row for a paced probe. */
const probeRow = (name, result, notes = "") => ({
  name, requests_per_s: result.requests_per_s, p50_ms: result.p50_ms, p99_ms: result.p99_ms, total: result.total,
  non_2xx: result.total - result.ok - result.errors, errors: result.errors, notes,
});

try {
  const email = `bench-stuffing-${Date.now()}@example.com`;
  const { data } = await json(`${api}/api/v1/auth/signup`, { method: "POST", body: JSON.stringify({ email, password: "bench-password" }) });
  const auth = { Authorization: `Bearer ${data.access_token}`, "Content-Type": "application/json" };
  const site = await json(`${api}/api/v1/sites/sites`, { method: "POST", headers: auth, body: JSON.stringify({ site_id: "BENCH-STUFFING", name: "Bench store" }) });
  console.log(`registering ${DEVICES} devices…`);
  const devices = await pool(Array.from({ length: DEVICES }, (_, i) => i), 8, async (i) => {
    const d = await json(`${api}/api/v1/devices/sites/${site.site_id}/devices`, {
      method: "POST", headers: auth, body: JSON.stringify({ device_id: `BENCH-STUFF-${i}`, name: `Till ${i}`, device_type: "pos_terminal" }),
    });
    return { id: d.device_id, key: d.api_key };
  });
  // One call per device first, as a running fleet has made: the measured heartbeats are steady ones.
  await pool(devices, 8, async (d) => {
    await fetch(`${api}/api/v1/agent/heartbeat`, { method: "POST", headers: { "content-type": "application/json", "x-device-id": d.id, "x-api-key": d.key }, body: "{}" }).then((r) => r.text());
  });

  const probe = (durationS = DURATION_S) => Promise.all([
    paced("GET /health", { url: `${api}/health`, ratePerS: PROBE_RATE, durationS }),
    paced("heartbeat", {
      url: `${api}/api/v1/agent/heartbeat`, method: "POST", body: "{}", headers: { "content-type": "application/json" },
      rotate: devices.map((d) => ({ "x-device-id": d.id, "x-api-key": d.key })), ratePerS: PROBE_RATE, durationS,
    }),
  ]);

  const floodDuration = OPENING_S + DURATION_S + 1;

  console.log(`measuring: ${DURATION_S} s idle; a flood of GET /version; the attack's first ${OPENING_S} s, then ${DURATION_S} s of it (${ATTACK_CONNECTIONS} connections each); ${DURATION_S} s idle again`);
  const [idleHealth, idleBeat] = await probe();

  // Reference: as many connections asking for the cheapest route there is, as fast as they can.
  const versionFlood = cannon({ url: `${api}/version`, connections: ATTACK_CONNECTIONS, duration: floodDuration });
  await probe(OPENING_S);
  const [referenceHealth, referenceBeat] = await probe();
  const reference = await versionFlood;

  const attackStatus = { 401: 0, 429: 0, other: 0 };
  let bcrypts = 0;
  let target = 0;
  const attack = cannon({
    url: api, connections: ATTACK_CONNECTIONS, duration: floodDuration,
    requests: [{
      method: "POST", path: "/api/v1/agent/heartbeat",
      setupRequest: (req) => {
        const d = devices[target++ % devices.length];
        const headers = { "content-type": "application/json", "x-device-id": d.id, "x-api-key": randomBytes(32).toString("base64url"), "cf-connecting-ip": ATTACKER };
        return { ...req, headers, body: "{}" };
      },
      onResponse: (status, _body, _context, headers) => {
        if (status === 401 || status === 429) attackStatus[status]++;
        else attackStatus.other++;
        const timing = Object.entries(headers).find(([name]) => name.toLowerCase() === "server-timing")?.[1];
        if (String(timing ?? "").includes('desc="bcrypt"')) bcrypts++;
      },
    }],
  });
  const [openingHealth, openingBeat] = await probe(OPENING_S);
  const [attackedHealth, attackedBeat] = await probe();
  const attackResult = await attack;
  // Idle again: this machine is shared, so the idle figures are taken on both sides of the floods.
  const [idleAfterHealth, idleAfterBeat] = await probe();

  // Against the worse of the two idle windows: what the floods add beyond the machine's own noise.
  const idleP99 = (a, b) => Math.max(a.p99_ms, b.p99_ms, 1);
  const healthIdleP99 = idleP99(idleHealth, idleAfterHealth);
  const beatIdleP99 = idleP99(idleBeat, idleAfterBeat);
  const ratio = (run, idle) => +(run.p99_ms / (idle === idleHealth ? healthIdleP99 : beatIdleP99)).toFixed(2);
  const rows = [
    probeRow("GET /health, idle", idleHealth),
    probeRow("GET /health, idle again afterwards", idleAfterHealth),
    probeRow("GET /health, during a GET /version flood", referenceHealth, `p99 ${ratio(referenceHealth, idleHealth)}× idle`),
    probeRow(`GET /health, attack's first ${OPENING_S} s`, openingHealth, `p99 ${ratio(openingHealth, idleHealth)}× idle`),
    probeRow("GET /health, under attack", attackedHealth, `p99 ${ratio(attackedHealth, idleHealth)}× idle`),
    probeRow("heartbeat, idle", idleBeat),
    probeRow("heartbeat, idle again afterwards", idleAfterBeat),
    probeRow("heartbeat, during a GET /version flood", referenceBeat, `p99 ${ratio(referenceBeat, idleBeat)}× idle`),
    probeRow(`heartbeat, attack's first ${OPENING_S} s`, openingBeat, `p99 ${ratio(openingBeat, idleBeat)}× idle`),
    probeRow("heartbeat, under attack", attackedBeat, `p99 ${ratio(attackedBeat, idleBeat)}× idle`),
    summary(`flood: GET /version, ${ATTACK_CONNECTIONS} connections`, reference),
    summary(`attack: wrong keys, ${ATTACK_CONNECTIONS} connections, one address`, attackResult,
      `401: ${attackStatus[401]}, 429: ${attackStatus[429]}, other: ${attackStatus.other}; bcrypt: ${bcrypts}`),
  ];
  console.log();
  printTable(rows);
  const goals = {
    p99_within_2x_of_idle_goal: 2,
    health_idle_p99_ms: healthIdleP99,
    heartbeat_idle_p99_ms: beatIdleP99,
    health_p99_ratio: ratio(attackedHealth, idleHealth),
    heartbeat_p99_ratio: ratio(attackedBeat, idleBeat),
    health_p99_ratio_first_seconds: ratio(openingHealth, idleHealth),
    heartbeat_p99_ratio_first_seconds: ratio(openingBeat, idleBeat),
    health_p99_ratio_during_version_flood: ratio(referenceHealth, idleHealth),
    heartbeat_p99_ratio_during_version_flood: ratio(referenceBeat, idleBeat),
  };
  goals.met = goals.health_p99_ratio <= 2 && goals.heartbeat_p99_ratio <= 2;
  console.log();
  console.log(`goal: p99 under attack within 2× of idle → /health ${goals.health_p99_ratio}×, heartbeat ${goals.heartbeat_p99_ratio}× ${goals.met ? "met" : "NOT met"} ` +
    `(its first ${OPENING_S} s: ${goals.health_p99_ratio_first_seconds}×, ${goals.heartbeat_p99_ratio_first_seconds}×; ` +
    `a GET /version flood: ${goals.health_p99_ratio_during_version_flood}×, ${goals.heartbeat_p99_ratio_during_version_flood}×); ` +
    `bcrypts the attack caused: ${bcrypts} of ${attackResult.requests.total} attempts`);
  writeResults("credential_stuffing", { devices: DEVICES, attack_connections: ATTACK_CONNECTIONS, probe_rate_per_s: PROBE_RATE, bcrypts, attack_status: attackStatus, scenarios: rows, goals });
} finally {
  await service.stop();
}
