import { parseArgs } from "node:util";
import { startFleet, type Fleet } from "./fleet";
import type { EnrolmentMethod } from "./device";

const USAGE = `npm run emulate -- --site SITE_ID --devices N [options]

  --url URL               the service (default http://127.0.0.1:8787)
  --bootstrap-key KEY     enrol with the site's bootstrap key
  --email E --password P  or as an operator: create and claim an enrolment intent per device
  --duration S            stop after S seconds (default: until Ctrl-C)
  --mode http|channel     http (default): heartbeat, telemetry and command polls over HTTP;
                          channel: over the device WebSocket channel (HTTP while it is down)
  --heartbeat S           heartbeat interval (default 10)
  --telemetry S           telemetry interval (default 15)
  --poll S                command poll interval (default 15)
  --restart-s S           how long a restart keeps a device offline (default 5)
  --update-failure-rate R share of update commands that fail (default 0.1)
  --name-prefix P         device names P-1 … P-N (default emu-<run id>)
  --quiet                 no progress line, only the summary`;

export interface CliResult {
  code: number;
}

function fail(message: string): CliResult {
  console.error(`${message}\n\n${USAGE}`);
  return { code: 2 };
}

function seconds(value: string | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name} must be a positive number of seconds`);
  return n;
}

export async function main(argv: string[]): Promise<CliResult> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: {
        site: { type: "string" }, devices: { type: "string" }, url: { type: "string" },
        "bootstrap-key": { type: "string" }, email: { type: "string" }, password: { type: "string" },
        duration: { type: "string" }, mode: { type: "string" },
        heartbeat: { type: "string" }, telemetry: { type: "string" }, poll: { type: "string" },
        "restart-s": { type: "string" }, "update-failure-rate": { type: "string" }, "name-prefix": { type: "string" },
        quiet: { type: "boolean" }, help: { type: "boolean" },
      },
    }).values;
  } catch (error) {
    return fail(String((error as Error).message));
  }
  if (parsed.help) {
    console.log(USAGE);
    return { code: 0 };
  }
  const url = (parsed.url ?? "http://127.0.0.1:8787").replace(/\/$/, "");
  const count = Number(parsed.devices);
  if (!parsed.site) return fail("--site is required");
  if (!Number.isInteger(count) || count < 1) return fail("--devices must be a whole number ≥ 1");
  let enrolment: EnrolmentMethod;
  if (parsed["bootstrap-key"]) enrolment = { kind: "bootstrap", bootstrapKey: parsed["bootstrap-key"] };
  else if (parsed.email && parsed.password) enrolment = { kind: "operator", email: parsed.email, password: parsed.password };
  else return fail("give --bootstrap-key, or --email and --password");
  const mode = parsed.mode ?? "http";
  if (mode !== "http" && mode !== "channel") return fail("--mode is http or channel");
  let cadence, durationS, restartS, updateFailureRate;
  try {
    cadence = { heartbeatS: seconds(parsed.heartbeat, 10, "heartbeat"), telemetryS: seconds(parsed.telemetry, 15, "telemetry"), pollS: seconds(parsed.poll, 15, "poll") };
    durationS = parsed.duration === undefined ? undefined : seconds(parsed.duration, 0, "duration");
    restartS = seconds(parsed["restart-s"], 5, "restart-s");
    updateFailureRate = parsed["update-failure-rate"] === undefined ? 0.1 : Number(parsed["update-failure-rate"]);
    if (!(updateFailureRate >= 0 && updateFailureRate <= 1)) throw new Error("--update-failure-rate is between 0 and 1");
  } catch (error) {
    return fail((error as Error).message);
  }

  if (mode === "channel") {
    const missing = await channelMissing(url);
    if (missing) return missing;
  }

  const fleet = startFleet({ url, siteId: parsed.site, devices: count, enrolment, cadence, mode, restartS, updateFailureRate, namePrefix: parsed["name-prefix"] });
  console.log(`emulating ${count} device(s) on site ${parsed.site} at ${url} over ${mode} (heartbeat ${cadence.heartbeatS} s, telemetry ${cadence.telemetryS} s, poll ${cadence.pollS} s${mode === "channel" ? " while the channel is down" : ""})` +
    `${durationS ? ` for ${durationS} s` : ""}; Ctrl-C stops`);
  await runUntilStopped(fleet, count, durationS, !parsed.quiet);
  printSummary(fleet, count);
  return { code: 0 };
}

/** Runs until `durationS` passes or Ctrl-C / SIGTERM, drawing the progress line meanwhile. */
async function runUntilStopped(fleet: Fleet, count: number, durationS: number | undefined, progress: boolean) {
  const interactive = progress && process.stdout.isTTY;
  let lastPrinted = 0;
  const draw = () => {
    const line = progressLine(fleet, count);
    if (interactive) process.stdout.write(`\r${line.padEnd(120)}`);
    else if (progress && Date.now() - lastPrinted >= 10_000) {
      console.log(line);
      lastPrinted = Date.now();
    }
  };
  const ticker = setInterval(draw, 1000);
  await new Promise<void>((resolve) => {
    const timer = durationS ? setTimeout(resolve, durationS * 1000) : undefined;
    const onSignal = () => {
      clearTimeout(timer);
      resolve();
    };
    process.once("SIGINT", onSignal);
    process.once("SIGTERM", onSignal);
  });
  clearInterval(ticker);
  if (interactive) process.stdout.write("\n");
  await fleet.stop();
}

export function progressLine(fleet: Fleet, count: number): string {
  const s = fleet.stats;
  const { perSecond, p99 } = s.window();
  const errors = Object.entries(s.errors()).map(([status, n]) => `${status}×${n}`).join(" ") || "none";
  const elapsed = Math.round((Date.now() - s.startedAt) / 1000);
  const clock = `${String(Math.floor(elapsed / 60)).padStart(2, "0")}:${String(elapsed % 60).padStart(2, "0")}`;
  const channels = fleet.devices.some((d) => d.channel !== undefined) ? ` (${fleet.onChannel()} on channel)` : "";
  return `[${clock}] enrolled ${s.enrolled}/${count}  online ${fleet.online()}${channels}  ${perSecond.toFixed(1)} req/s  p99 ${p99} ms  errors ${errors}  ` +
    `commands ${s.commands.completed} done, ${s.commands.failed} failed`;
}

export function summaryOf(fleet: Fleet, count: number) {
  const s = fleet.stats;
  return {
    devices: count,
    enrolled: s.enrolled,
    duration_s: Math.round((Date.now() - s.startedAt) / 1000),
    requests: s.requests,
    answers_by_status: Object.fromEntries(s.byStatus),
    network_failures_by_cause: Object.fromEntries(s.networkCauses),
    latency_by_call: s.latencySummary(),
    commands: s.commands,
  };
}

function printSummary(fleet: Fleet, count: number) {
  const summary = summaryOf(fleet, count);
  console.log(`\nsummary: ${summary.enrolled}/${count} enrolled, ${summary.requests} requests in ${summary.duration_s} s`);
  console.log(`  answers: ${Object.entries(summary.answers_by_status).map(([k, v]) => `${k}×${v}`).join(" ") || "none"}`);
  if (Object.keys(summary.network_failures_by_cause).length) console.log(`  transport failures: ${Object.entries(summary.network_failures_by_cause).map(([k, v]) => `${k}×${v}`).join(" ")}`);
  for (const [kind, l] of Object.entries(summary.latency_by_call)) console.log(`  ${kind.padEnd(9)} ${String(l.count).padStart(7)} calls  p50 ${l.p50_ms} ms  p99 ${l.p99_ms} ms  max ${Math.round(l.max_ms)} ms`);
  const c = summary.commands;
  console.log(`  commands: ${c.received} received, ${c.completed} completed, ${c.failed} failed, ${c.executedTwice} executed twice`);
}

/** `--mode channel` against a service without the device channel is a mistake to report, not to emulate. */
async function channelMissing(url: string): Promise<CliResult | undefined> {
  let status: number;
  try {
    status = (await fetch(`${url}/api/v1/agent/channel`)).status;
  } catch (error) {
    console.error(`cannot reach ${url}: ${(error as Error).message}`);
    return { code: 1 };
  }
  if (status !== 404) return undefined;
  console.error(`--mode channel: ${url} has no device channel (GET /api/v1/agent/channel answers 404). Use --mode http.`);
  return { code: 2 };
}
