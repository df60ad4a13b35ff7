// `npm run soak [-- options]`: a long run of emulated devices against the BUILT bundle on loopback
// (workerd through Miniflare, as bench/ does), with operator commands and jobs on a timer. Not a test:
// it takes 10 minutes by default and loads the machine. It reports, and fails (exit 1) unless:
//   - no answer was 5xx and no call failed to connect;
//   - every command queued (directly and by the jobs) was delivered once and completed once;
//   - every job completed.
// It also prints workerd's resident memory at the start, halfway and at the end, and the p50/p99 of
// each device call. Figures go to section "soak" of bench/results.json.
//
//   npm run soak                                  # 1,000 devices, 10 minutes, spec cadence (10/15/15 s)
//   npm run soak -- --devices 50 --minutes 1 --every 20 --skip-build   # a short check
import { execSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { parseArgs } from "node:util";
import { startService, ROOT } from "./lib/serve-bundle.mjs";
import { loadEmulator } from "./lib/emulator.mjs";
import { writeResults } from "../bench/lib.mjs";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    devices: { type: "string" }, minutes: { type: "string" }, every: { type: "string" },
    heartbeat: { type: "string" }, telemetry: { type: "string" }, poll: { type: "string" }, "skip-build": { type: "boolean" },
  },
});
const DEVICES = Number(values.devices ?? 1000);
const MINUTES = Number(values.minutes ?? 10);
/** Seconds between one operator command and one job (each). */
const EVERY_S = Number(values.every ?? 60);
const cadence = { heartbeatS: Number(values.heartbeat ?? 10), telemetryS: Number(values.telemetry ?? 15), pollS: Number(values.poll ?? 15) };
const COMMAND_TYPES = ["ping", "restart", "clear_cache", "collect_logs"];

if (!values["skip-build"]) {
  console.log("building the bundle…");
  execSync("npm run build --silent", { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });
}

/** Resident memory (MB) of the workerd processes under this one. */
function workerdRssMb() {
  let total = 0;
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    try {
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      if (!/^Name:\s*workerd/m.test(status)) continue;
      const ppid = Number(/^PPid:\s*(\d+)/m.exec(status)?.[1]);
      if (!isDescendant(ppid)) continue;
      total += Number(/^VmRSS:\s*(\d+)/m.exec(status)?.[1] ?? 0) / 1024;
    } catch {
      // the process ended meanwhile
    }
  }
  return Math.round(total);
}

function isDescendant(pid) {
  for (let hops = 0; pid > 1 && hops < 10; hops++) {
    if (pid === process.pid) return true;
    try {
      pid = Number(/^PPid:\s*(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]);
    } catch {
      return false;
    }
  }
  return false;
}

const service = await startService({ quiet: true, assets: false, bindings: { BOOTSTRAP_ENROLMENTS_PER_HOUR: String(DEVICES * 10) } });
const base = service.url;
const { startFleet, summaryOf, progressLine } = await loadEmulator();

async function api(path, { method = "GET", token, body } = {}) {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path} → ${response.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

let fleet;
const failures = [];
try {
  const signup = await api("/api/v1/auth/signup", { method: "POST", body: { email: `soak-${Date.now()}@example.com`, password: "soak-password" } });
  const token = signup.data.access_token;
  const siteId = "SOAK-1";
  await api("/api/v1/sites/sites", { method: "POST", token, body: { site_id: siteId, name: "Soak store" } });
  const { bootstrap_key } = await api(`/api/v1/sites/${siteId}/bootstrap-key`, { method: "POST", token });

  console.log(`soak: ${DEVICES} devices, ${MINUTES} min, heartbeat ${cadence.heartbeatS} s, telemetry ${cadence.telemetryS} s, poll ${cadence.pollS} s, a command and a job every ${EVERY_S} s`);
  fleet = startFleet({ url: base, siteId, devices: DEVICES, enrolment: { kind: "bootstrap", bootstrapKey: bootstrap_key }, cadence, updateFailureRate: 0, namePrefix: "soak" });
  const enrolStarted = Date.now();
  while (fleet.stats.enrolled < DEVICES) {
    await new Promise((resolve) => setTimeout(resolve, 1000));
    process.stdout.write(`\r${progressLine(fleet, DEVICES)}`.padEnd(130));
  }
  const enrolS = Math.round((Date.now() - enrolStarted) / 1000);
  console.log(`\nall ${DEVICES} enrolled in ${enrolS} s; soaking for ${MINUTES} min`);

  const memory = [{ at_min: 0, workerd_rss_mb: workerdRssMb() }];
  const commands = [];
  const jobs = [];
  const deviceIds = () => fleet.devices.map((d) => d.deviceId).filter(Boolean);
  const started = Date.now();
  const endAt = started + MINUTES * 60_000;
  let nextOperatorAt = started;
  let nextMemoryAt = started + 60_000;
  let round = 0;
  while (Date.now() < endAt) {
    const now = Date.now();
    if (now >= nextOperatorAt) {
      const ids = deviceIds();
      const target = ids[(round * 7919) % ids.length];
      const type = COMMAND_TYPES[round % COMMAND_TYPES.length];
      const queued = await api(`/api/v1/devices/${target}/commands`, { method: "POST", token, body: { command_type: type, payload: { round } } });
      commands.push(queued.command_id);
      const job = await api(`/api/v1/jobs/sites/${siteId}/jobs`, { method: "POST", token, body: { action: "update_config", config_version: `soak.${round}` } });
      jobs.push(job.job_id);
      round++;
      nextOperatorAt += EVERY_S * 1000;
    }
    if (now >= nextMemoryAt) {
      memory.push({ at_min: Math.round((now - started) / 60_000), workerd_rss_mb: workerdRssMb() });
      nextMemoryAt += 60_000;
    }
    process.stdout.write(`\r${progressLine(fleet, DEVICES)}`.padEnd(130));
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  memory.push({ at_min: MINUTES, workerd_rss_mb: workerdRssMb() });

  // Let the last commands reach their devices: a job of a thousand executions, queued in the last
  // minute, needs every device's next poll, a restart's downtime and the hub's turn through them.
  // The wait ends as soon as everything settled; what is still open after it counts as a failure.
  console.log("\nwaiting for the last commands and jobs…");
  const graceUntil = Date.now() + Math.max(120, 4 * cadence.pollS + 15) * 1000;
  let jobStates = [];
  for (;;) {
    jobStates = await Promise.all(jobs.map((id) => api(`/api/v1/jobs/${id}`, { token })));
    const commandStates = await Promise.all(commands.map((id) => api(`/api/v1/commands/${id}`, { token })));
    const settled = jobStates.every((j) => j.status !== "queued" && j.status !== "sent") && commandStates.every((c) => ["completed", "failed", "expired", "cancelled"].includes(c.status));
    if (settled || Date.now() > graceUntil) {
      for (const c of commandStates) {
        if (c.status !== "completed" || c.attempts !== 1) failures.push(`command ${c.command_id} (${c.command_type}): ${c.status} after ${c.attempts} deliveries`);
      }
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
  for (const j of jobStates) {
    if (j.status !== "completed" || j.counts?.succeeded !== j.counts?.total) failures.push(`job ${j.job_id}: ${j.status}, ${JSON.stringify(j.counts)}`);
  }
  await fleet.stop();

  const summary = summaryOf(fleet, DEVICES);
  const serverErrors = Object.entries(summary.answers_by_status).filter(([status]) => status === "network" || Number(status) >= 500);
  for (const [status, n] of serverErrors) failures.push(`${n} answers ${status === "network" ? "failed to connect" : status}`);
  const expectedExecutions = commands.length + jobStates.reduce((sum, j) => sum + (j.counts?.total ?? 0), 0);
  if (summary.commands.executedTwice) failures.push(`${summary.commands.executedTwice} commands executed more than once`);
  if (summary.commands.received !== expectedExecutions) failures.push(`devices executed ${summary.commands.received} commands, ${expectedExecutions} were queued`);

  console.log(`\nsoak summary: ${DEVICES} devices for ${MINUTES} min, ${summary.requests} device calls`);
  console.log(`  answers: ${Object.entries(summary.answers_by_status).map(([k, v]) => `${k}×${v}`).join(" ")}`);
  if (Object.keys(summary.network_failures_by_cause).length) console.log(`  transport failures: ${Object.entries(summary.network_failures_by_cause).map(([k, v]) => `${k}×${v}`).join(" ")}`);
  for (const [kind, l] of Object.entries(summary.latency_by_call)) console.log(`  ${kind.padEnd(9)} ${String(l.count).padStart(8)} calls  p50 ${l.p50_ms} ms  p99 ${l.p99_ms} ms`);
  console.log(`  commands: ${commands.length} direct + ${jobs.length} jobs → ${expectedExecutions} executions expected, ${summary.commands.received} done, ${summary.commands.executedTwice} twice`);
  console.log(`  workerd RSS: ${memory.map((m) => `${m.at_min} min ${m.workerd_rss_mb} MB`).join(", ")}`);
  console.log(failures.length ? `✖ ${failures.length} problem(s):\n  ${failures.slice(0, 20).join("\n  ")}` : "✔ 0 5xx, every command delivered and completed exactly once, every job completed");
  writeResults("soak", { devices: DEVICES, minutes: MINUTES, cadence, every_s: EVERY_S, enrol_s: enrolS, memory, summary, commands: commands.length, jobs: jobs.length, failures });
  if (failures.length) process.exitCode = 1;
} finally {
  await fleet?.stop();
  await service.stop();
}
