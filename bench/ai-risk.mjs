// node bench/ai-risk.mjs — how well the assistant's failure risk (src/shared/ai-engine.ts) foresees
// failures, on synthetic traces. Merges section "ai_risk" into bench/results.json.
//
// Each trace is 30 h of one simulated terminal: the simulated agents' own health model
// (durable-objects/agent-model.ts: daily load curve, noise, memory creep, disk growth) sampled every
// 15 s and kept by the hub's own storage rule (durable-objects/metrics.ts `decide`: a snapshot every
// 5 minutes, or a real change), as the risk endpoint would read it. From hour 24 on, the risk is
// assessed every 5 minutes over the trailing 24 h, exactly as `GET /api/v1/ai/predict/{id}` does, and
// an alarm is a score at or above RISK_ALERT_THRESHOLD.
//
// Three kinds of trace, all deterministic (seeded):
//   failing  — one of the agents' incident kinds is injected at a time F in hours 26–29, preceded by
//              the degradation that usually announces it (see PRECURSORS): a disk filling before the
//              database's I/O errors, a memory leak before the POS app's watchdog timeout, a runaway
//              process before CPU saturation, declines creeping up before the payment gateway drops,
//              and the uplink flapping (offline transitions) before the network is lost.
//   healthy  — no failure (seeds whose model has no incident in the 30 h); four in five carry one
//              harmless event (BENIGN: an update download, a short error burst, a power blip, a
//              backup's CPU burst), which must not raise an alarm.
//   sudden   — the model's own incidents, which start without warning: reported apart, because no
//              trend can foresee them (recall there measures what is possible, not the engine).
// Precision = failing traces alarmed before F / all traces alarmed (failing before F + healthy);
// recall = failing traces alarmed before F / failing traces; lead = F − first alarm.
//
//   node bench/ai-risk.mjs                 # 20 failing traces per kind, 100 healthy, 20 sudden
//   BENCH_AI_TRACES=60 node bench/ai-risk.mjs
import { build } from "esbuild";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { writeResults } from "./lib.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const PER_KIND = Number(process.env.BENCH_AI_TRACES ?? 20);

// The engine and the agent model are TypeScript: bundle the pure parts for Node.
const bundle = await build({
  stdin: {
    contents: [
      'export { assessRisk, RISK_ALERT_THRESHOLD } from "./src/shared/ai-engine.ts";',
      'export { healthAt, incidentsBetween, rand, seedOf } from "./durable-objects/agent-model.ts";',
      'export { decide } from "./durable-objects/metrics.ts";',
      'export { readConfig } from "./src/shared/config.ts";',
    ].join("\n"),
    resolveDir: ROOT, loader: "ts",
  },
  bundle: true, format: "esm", platform: "node", write: false, logLevel: "error",
});
const m = await import(`data:text/javascript;base64,${Buffer.from(bundle.outputFiles[0].text).toString("base64")}`);

const MIN = 60_000;
const HOUR = 60 * MIN;
const TELEMETRY_MS = 15_000;
const EVAL_EVERY_MS = 5 * MIN;
const WINDOW_MS = 24 * HOUR;
const TRACE_MS = 30 * HOUR;
const POLICY = m.readConfig({}).metrics;
const START = Date.UTC(2026, 2, 2, 0, 0);
const KINDS = ["database", "pos_app", "cpu", "payment_gateway", "network"];

/** How each kind is announced: the precursor's length (ms) and what it does to a sample at progress p (0 → 1). */
const PRECURSORS = {
  database: { min: 3 * HOUR, max: 8 * HOUR, apply: (s, p, base) => { s.disk = base.disk + (98.5 - base.disk) * p; } },
  pos_app: { min: 90 * MIN, max: 4 * HOUR, apply: (s, p, base) => { s.memory = base.memory + (96 - base.memory) * p; } },
  cpu: { min: 45 * MIN, max: 2 * HOUR, apply: (s, p, base) => { s.cpu = Math.max(s.cpu, base.cpu + (99 - base.cpu) * p); } },
  payment_gateway: { min: 30 * MIN, max: 90 * MIN, apply: (s, p) => { s.error_rate = Math.max(s.error_rate, 0.004 + 0.076 * p * p); } },
  network: { min: 30 * MIN, max: 90 * MIN, apply: (s, p) => { s.latency *= 1 + 3 * p; } },
};

/**
 * Harmless events a healthy fleet shows, given to four in five healthy traces at a seeded time in
 * hours 25–29: an alarm on one of them is a false alarm.
 */
const BENIGN = {
  update_download: { ms: 0, apply: (s, since) => { s.disk += Math.min(6, since / MIN); } },
  error_burst: { ms: 5 * MIN, apply: (s) => { s.error_rate = Math.max(s.error_rate, 0.02); } },
  power_blip: { ms: 3 * MIN, offline: true },
  backup_cpu: { ms: 10 * MIN, apply: (s) => { s.cpu = Math.max(s.cpu, 92); } },
};
const BENIGN_KINDS = [null, ...Object.keys(BENIGN)];

const agentOf = (deviceId, seed, bootMs) => ({
  device_id: deviceId, device_type: "pos_terminal", seed, boot_ms: bootMs, created_ms: bootMs - 200 * 24 * HOUR,
  config_version: "cfg-1", state: "ready", fault: null,
});

/**
 * One trace: the stored samples (the hub's rule) and the offline transitions, with an optional
 * injected failure at `failAt` preceded by its precursor from `precursorFrom`.
 */
function trace(seed, deviceId, failure, benign = null) {
  const bootMs = START - Math.floor(m.rand(seed, 900) * 5 * 24 * HOUR);
  const agent = agentOf(deviceId, seed, bootMs);
  const stored = [];
  const offlineAt = [];
  let state;
  // Network flaps: 2–4 outages of 2–4 minutes spread over the precursor.
  const flapCount = 2 + Math.floor(m.rand(seed, 910) * 3);
  const flaps = failure?.kind === "network"
    ? Array.from({ length: flapCount }, (_, i) => {
      const at = failure.precursorFrom + ((i + 0.5) / flapCount) * (failure.at - failure.precursorFrom);
      return { from: at, to: at + (2 + 2 * m.rand(seed, 911, i)) * MIN };
    })
    : [];
  const benignAt = START + 25 * HOUR + Math.floor(m.rand(seed, 930) * 4 * HOUR);
  if (benign && BENIGN[benign].offline) flaps.push({ from: benignAt, to: benignAt + BENIGN[benign].ms });
  for (const f of flaps) offlineAt.push(f.from);
  for (let t = START; t <= START + TRACE_MS; t += TELEMETRY_MS) {
    if (flaps.some((f) => t >= f.from && t < f.to)) continue;
    const h = m.healthAt(agent, t).metrics;
    const sample = {
      cpu: h.cpu_usage_percent, memory: h.memory_usage_percent, disk: h.disk_usage_percent,
      temperature: h.temperature_celsius, latency: h.network_latency_ms, error_rate: h.error_rate,
    };
    const effect = benign && BENIGN[benign].apply;
    if (effect && t >= benignAt && (BENIGN[benign].ms === 0 || t < benignAt + BENIGN[benign].ms)) effect(sample, t - benignAt);
    if (failure && t >= failure.precursorFrom) {
      const base = failure.base ??= { ...sample };
      const p = Math.min(1, (t - failure.precursorFrom) / (failure.at - failure.precursorFrom));
      PRECURSORS[failure.kind].apply(sample, p, base);
      if (t >= failure.at) sample.error_rate = Math.max(sample.error_rate, 0.15);
    }
    const reason = m.decide(state, {
      cpu_usage: sample.cpu, memory_usage: sample.memory, disk_usage: sample.disk, network_latency_ms: sample.latency, error_rate: sample.error_rate,
      uptime_seconds: h.uptime_seconds,
    }, t, POLICY);
    if (reason === "unchanged") continue;
    stored.push({ t, ...sample });
    state = {
      stored_at_ms: t, cpu: sample.cpu, memory: sample.memory, disk: sample.disk, latency: sample.latency, error_rate: sample.error_rate,
      boot_id: null, uptime_s: h.uptime_seconds, restart_seen: 0,
    };
  }
  return { stored, offlineAt };
}

/** The first time from hour 24 (and before `until`) the risk reaches the alert threshold. */
function firstAlarm({ stored, offlineAt }, until) {
  let from = 0;
  for (let t = START + WINDOW_MS; t < until; t += EVAL_EVERY_MS) {
    while (from < stored.length && stored[from].t < t - WINDOW_MS) from++;
    let to = from;
    while (to < stored.length && stored[to].t <= t) to++;
    const offline = offlineAt.filter((at) => at > t - WINDOW_MS && at <= t).length;
    const r = m.assessRisk(stored.slice(from, to), { restarts: 0, offline_transitions: offline }, WINDOW_MS);
    if (r.risk_score !== null && r.risk_score >= m.RISK_ALERT_THRESHOLD) return { at: t, score: r.risk_score, top: r.factors[0]?.name };
  }
  return null;
}

const quietSeed = (seed) => m.incidentsBetween(seed, START - 2 * HOUR, START + TRACE_MS).length === 0;
const median = (v) => {
  if (!v.length) return null;
  const s = [...v].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const started = Date.now();
const perKind = {};
let tp = 0;
let fn = 0;
let earlyPositiveAlarms = 0;
const leads = [];
let seedNo = 0;
const nextQuietSeed = () => {
  for (;;) {
    const seed = m.seedOf(`bench-ai-${seedNo++}`);
    if (quietSeed(seed)) return seed;
  }
};

for (const kind of KINDS) {
  const row = (perKind[kind] = { traces: 0, detected: 0, leads_min: [] });
  for (let i = 0; i < PER_KIND; i++) {
    const seed = nextQuietSeed();
    const at = START + 26 * HOUR + Math.floor(m.rand(seed, 920) * 3 * HOUR);
    const { min, max } = PRECURSORS[kind];
    const precursorFrom = at - (min + m.rand(seed, 921) * (max - min));
    const t = trace(seed, `FAIL-${kind}-${i}`, { kind, at, precursorFrom });
    const alarm = firstAlarm(t, at);
    row.traces++;
    if (alarm) {
      tp++;
      row.detected++;
      const lead = (at - alarm.at) / MIN;
      leads.push(lead);
      row.leads_min.push(lead);
      // An alarm before the precursor began is right about the device but for no visible reason.
      if (alarm.at < precursorFrom) earlyPositiveAlarms++;
    } else {
      fn++;
    }
  }
}

let fp = 0;
const healthyCount = PER_KIND * KINDS.length;
const falseAlarms = {};
const falseAlarmsByEvent = {};
for (let i = 0; i < healthyCount; i++) {
  const seed = nextQuietSeed();
  const benign = BENIGN_KINDS[i % BENIGN_KINDS.length];
  const alarm = firstAlarm(trace(seed, `OK-${i}`, undefined, benign), START + TRACE_MS);
  if (alarm) {
    fp++;
    falseAlarms[alarm.top] = (falseAlarms[alarm.top] ?? 0) + 1;
    falseAlarmsByEvent[benign ?? "none"] = (falseAlarmsByEvent[benign ?? "none"] ?? 0) + 1;
  }
}

// The model's own incidents: seeds with one starting in hours 26–29, nothing injected.
let suddenTraces = 0;
let suddenDetected = 0;
for (let n = 0; suddenTraces < PER_KIND && n < 20_000; n++) {
  const seed = m.seedOf(`bench-ai-sudden-${n}`);
  const incidents = m.incidentsBetween(seed, START - 2 * HOUR, START + TRACE_MS);
  if (incidents.length !== 1 || incidents[0].start_ms < START + 26 * HOUR || incidents[0].start_ms > START + 29 * HOUR) continue;
  suddenTraces++;
  if (firstAlarm(trace(seed, `SUDDEN-${n}`), incidents[0].start_ms)) suddenDetected++;
}

const round = (v, d = 3) => (v === null ? null : Math.round(v * 10 ** d) / 10 ** d);
const precision = tp + fp ? tp / (tp + fp) : null;
const recall = tp + fn ? tp / (tp + fn) : null;
const result = {
  threshold: m.RISK_ALERT_THRESHOLD,
  failing_traces: tp + fn, healthy_traces: healthyCount,
  true_positives: tp, false_negatives: fn, false_positives: fp,
  precision: round(precision), recall: round(recall),
  median_lead_min: round(median(leads), 1),
  alarms_before_precursor: earlyPositiveAlarms,
  false_alarms_by_top_factor: falseAlarms,
  false_alarms_by_benign_event: falseAlarmsByEvent,
  per_kind: Object.fromEntries(Object.entries(perKind).map(([k, r]) => [k, { traces: r.traces, recall: round(r.detected / r.traces), median_lead_min: round(median(r.leads_min), 1) }])),
  sudden_incidents: { traces: suddenTraces, alarmed_before_onset: suddenDetected },
  seconds: round((Date.now() - started) / 1000, 1),
};

console.log(`AI failure risk at threshold ${result.threshold}: ${result.failing_traces} failing traces, ${result.healthy_traces} healthy`);
console.log(`  precision ${result.precision}  recall ${result.recall}  median lead ${result.median_lead_min} min  (TP ${tp}, FN ${fn}, FP ${fp})`);
for (const [kind, r] of Object.entries(result.per_kind)) console.log(`  ${kind.padEnd(16)} recall ${r.recall}  median lead ${r.median_lead_min} min`);
console.log(`  sudden incidents (no precursor): ${suddenDetected} of ${suddenTraces} alarmed before onset`);
if (fp) console.log(`  false alarms by top factor: ${JSON.stringify(falseAlarms)}, by harmless event: ${JSON.stringify(falseAlarmsByEvent)}`);
console.log(`  (${result.seconds} s)`);
writeResults("ai_risk", result);
