import { and, asc, desc, eq, gt, inArray, lte, sql } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { aiExchanges, aiPreferences, devices, jobs } from "../db/schema";
import { siteHub } from "../hub/client";
import { workerClock } from "../lib/clock";
import { iso } from "../shared/time";
import { fleetDefaultBaseline, scoreAgainst, type MetricValues } from "../shared/ai-engine";
import type { DeviceAnomaly, DeviceRiskSummary } from "../shared/hub-contract";
import { toAgentDevice } from "./agents";
import { authorizeSite, deviceNotFound, visibleSiteIds } from "./access";
import type { DeviceRow } from "./devices";

/**
 * The assistant: anomaly scores, failure risk and answers to questions, composed from the records
 * (the hubs' assessments, D1's devices and jobs) by fixed rules. It only reads, apart from its own
 * memory (the user's persona and last exchanges): whatever a question says, nothing is queued or
 * changed. docs/ai.md.
 */

export const PERSONAS = ["Maintenance", "Predictive", "Executive"] as const;
export type Persona = (typeof PERSONAS)[number];
export const DEFAULT_PERSONA: Persona = "Maintenance";

/** Exchanges kept per user, and for how long. */
export const MEMORY_EXCHANGES = 5;
export const MEMORY_TTL_MS = 86_400_000;
/** The window a failure-risk assessment reads by default. */
export const DEFAULT_RISK_WINDOW_H = 24;
/** Events of a named device shown in the status block. */
const STATUS_EVENTS = 5;
/** Devices named in one question that get a status block. */
const MAX_NAMED_DEVICES = 3;
/** Sites one fleet-wide question reads at most (the ones with devices). */
const MAX_QUERY_SITES = 25;
/** Hub calls in flight at once for a fleet-wide list. */
const HUB_CONCURRENCY = 6;

async function inBatches<T, R>(items: T[], size: number, run: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += size) out.push(...(await Promise.all(items.slice(i, i + size).map(run))));
  return out;
}

/** The caller's sites that have at least one device (the only ones whose hub has anything to say). */
async function sitesWithDevices(db: Db, user: AuthUser, limit?: number): Promise<string[]> {
  const visible = await visibleSiteIds(db, user);
  if (!visible.length) return [];
  const rows = await db.selectDistinct({ siteId: devices.siteId }).from(devices)
    .where(sql`${devices.siteId} IN (SELECT value FROM json_each(${JSON.stringify(visible)}))`)
    .orderBy(asc(devices.siteId)).all();
  const ids = rows.map((r) => r.siteId);
  return limit === undefined ? ids : ids.slice(0, limit);
}

/**
 * A device named in a body, checked as the access layer checks one named in a path: unknown, or on
 * a site the caller has no role on → the same 404.
 */
export async function viewableDevice(db: Db, user: AuthUser, deviceId: string, request?: Request): Promise<DeviceRow> {
  const device = await db.select().from(devices).where(eq(devices.deviceId, deviceId)).get();
  if (!device) throw deviceNotFound(deviceId);
  await authorizeSite(db, user, device.siteId, "viewer", request, { hiddenAs: () => deviceNotFound(deviceId) });
  return device;
}

// ---- analyze, anomalies, predict ----------------------------------------------------------------

export type AnalyzeMetrics = {
  cpu_usage?: number; memory_usage?: number; disk_usage?: number; temperature?: number; network_latency?: number; error_rate?: number;
};

const toValues = (m: AnalyzeMetrics): MetricValues => ({
  cpu: m.cpu_usage, memory: m.memory_usage, disk: m.disk_usage, temperature: m.temperature, latency: m.network_latency, error_rate: m.error_rate,
});

/** Scores the metrics against the device's baseline (in its hub) when one is named, else against fleet-wide defaults. */
export async function analyzeMetrics(env: Env, db: Db, user: AuthUser, input: { device_id?: string; metrics: AnalyzeMetrics }, request?: Request) {
  const device = input.device_id ? await viewableDevice(db, user, input.device_id, request) : undefined;
  const values = toValues(input.metrics);
  const assessment = device
    ? await siteHub(env, device.siteId).aiScoreValues(device.deviceId, values)
    : scoreAgainst(values, fleetDefaultBaseline());
  return {
    device_id: device?.deviceId ?? null,
    anomaly_score: assessment.score,
    is_anomaly: assessment.is_anomaly,
    basis: assessment.basis,
    reasons: assessment.reasons,
    explanation: assessment.explanation,
    ...("samples_needed" in assessment && assessment.samples_needed !== undefined ? { samples_needed: assessment.samples_needed } : {}),
  };
}

/** Current anomalies across the caller's sites (or the one named), each computed in its site's hub, highest first. */
export async function listAnomalies(env: Env, db: Db, user: AuthUser, siteId: string | undefined, minScore: number) {
  const sites = siteId ? [siteId] : await sitesWithDevices(db, user);
  const perSite = await inBatches(sites, HUB_CONCURRENCY, (id) => siteHub(env, id).aiAnomalies(minScore));
  const anomalies = perSite.flat().sort((a, b) => b.score - a.score || a.device_id.localeCompare(b.device_id));
  return { anomalies, total: anomalies.length, min_score: minScore };
}

/** One device's failure risk over the last `hours`, computed in its hub from its stored history. */
export async function predictFailure(env: Env, device: DeviceRow, hours = DEFAULT_RISK_WINDOW_H) {
  const { risk } = await siteHub(env, device.siteId).aiDeviceAssessment(toAgentDevice(device), hours * 3_600_000, STATUS_EVENTS);
  return { device_id: device.deviceId, site_id: device.siteId, ...risk };
}

// ---- persona ------------------------------------------------------------------------------------

/** The persona named case-insensitively, or undefined. */
export const personaNamed = (text: string): Persona | undefined => PERSONAS.find((p) => p.toLowerCase() === text.trim().toLowerCase());

export async function getPersona(db: Db, user: AuthUser): Promise<{ mode: Persona; updated_at: string | null }> {
  const row = await db.select().from(aiPreferences).where(eq(aiPreferences.userId, user.id)).get();
  return row ? { mode: row.mode, updated_at: row.updatedAt } : { mode: DEFAULT_PERSONA, updated_at: null };
}

export async function setPersona(db: Db, user: AuthUser, mode: Persona) {
  const at = iso(workerClock.now());
  await db.insert(aiPreferences).values({ userId: user.id, mode, updatedAt: at })
    .onConflictDoUpdate({ target: aiPreferences.userId, set: { mode, updatedAt: at } }).run();
  return { mode, updated_at: at };
}

// ---- memory -------------------------------------------------------------------------------------

export async function recentExchanges(db: Db, user: AuthUser) {
  const now = iso(workerClock.now());
  const rows = await db.select().from(aiExchanges)
    .where(and(eq(aiExchanges.userId, user.id), gt(aiExchanges.expiresAt, now)))
    .orderBy(desc(aiExchanges.id)).limit(MEMORY_EXCHANGES).all();
  return rows.reverse().map((r) => ({ query: r.query, response: r.response, intent: r.intent, device_ids: r.deviceIds, at: r.createdAt }));
}

async function remember(db: Db, user: AuthUser, exchange: { query: string; response: string; intent: string; deviceIds: string[] }) {
  const now = workerClock.now();
  await db.batch([
    db.insert(aiExchanges).values({
      userId: user.id, query: exchange.query, response: exchange.response, intent: exchange.intent, deviceIds: exchange.deviceIds,
      createdAt: iso(now), expiresAt: iso(now + MEMORY_TTL_MS),
    }),
    // Keep only the newest few of this user, and nobody's expired ones.
    db.delete(aiExchanges).where(and(eq(aiExchanges.userId, user.id), sql`${aiExchanges.id} NOT IN (SELECT id FROM ${aiExchanges} WHERE user_id = ${user.id} ORDER BY id DESC LIMIT ${MEMORY_EXCHANGES})`)),
    db.delete(aiExchanges).where(lte(aiExchanges.expiresAt, iso(now))),
  ]);
}

export async function forgetConversation(db: Db, user: AuthUser): Promise<{ deleted: number }> {
  const result = await db.delete(aiExchanges).where(eq(aiExchanges.userId, user.id)).run();
  return { deleted: result.meta.changes ?? 0 };
}

// ---- questions ----------------------------------------------------------------------------------

export const INTENTS = ["status", "health", "risk", "anomalies", "history", "comparison", "help"] as const;
export type Intent = (typeof INTENTS)[number];

/** Checked in this order; the first that matches wins. */
const INTENT_PATTERNS: [Intent, RegExp][] = [
  ["help", /^\s*(help|\?|what can you do\b|how do i use)/i],
  ["comparison", /\b(compare|comparison|versus|vs\.?|worst|best|rank|which (device|terminal|till)s?)\b/i],
  ["anomalies", /\b(anomal\w*|unusual|abnormal|outliers?|spikes?|strange|weird)\b/i],
  ["risk", /\b(risks?|fail\w*|predict\w*|forecast|likely|break|full|threshold|trend\w*)\b/i],
  ["history", /\b(commands?|jobs?|history|happened|recent(ly)?|events?|log)\b/i],
  ["health", /\b(health\w*|ok|okay|fine|working|problems?|issues?)\b/i],
  ["status", /\b(status|online|offline|state|how is|how are|up|down)\b/i],
];

export function parseIntent(query: string): Intent {
  for (const [intent, pattern] of INTENT_PATTERNS) if (pattern.test(query)) return intent;
  return "status";
}

/** Words a question would use to ask for an action; the assistant says it cannot act. */
const ACTION_WORDS = /\b(restart|reboot|delete|remove|queue|run|execute|push|update|install|shut ?down|wipe|reset|disable|suspend|retire|cancel)\b/i;

/** Tokens that could be device ids: id characters, with a digit or a dash (plain words are not looked up). */
export function candidateDeviceIds(text: string): string[] {
  const tokens = text.match(/[A-Za-z0-9][A-Za-z0-9_.:-]{1,127}/g) ?? [];
  const cleaned = tokens.map((t) => t.replace(/[.:-]+$/, "")).filter((t) => /[0-9-]/.test(t) && t.length >= 2);
  return [...new Set(cleaned.map((t) => t.toLowerCase()))].slice(0, 20);
}

/** The devices the text names that the caller may view; any other id is ignored, exactly like an unknown one. */
async function namedVisibleDevices(db: Db, user: AuthUser, text: string): Promise<DeviceRow[]> {
  const candidates = candidateDeviceIds(text);
  if (!candidates.length) return [];
  const found = await db.select().from(devices)
    .where(sql`lower(${devices.deviceId}) IN (SELECT value FROM json_each(${JSON.stringify(candidates)}))`).all();
  if (!found.length) return [];
  const visible = new Set(await visibleSiteIds(db, user));
  return found.filter((d) => visible.has(d.siteId));
}

type Source = { type: string; id: string; detail: string };
type Assessment = Awaited<ReturnType<ReturnType<typeof siteHub>["aiDeviceAssessment"]>>;
type StatusBlock = {
  device_id: string; site_id: string; name: string; status: string; last_seen: string | null;
  risk_score: number | null; risk_level: string; risk_explanation: string; recommendations: string[];
  anomaly_score: number | null; anomaly_explanation: string; recent_events: { type: string; at: string; summary: string }[];
};

function summariseEvent(e: { type: string; data: unknown }): string {
  const d = (e.data ?? {}) as Record<string, unknown>;
  switch (e.type) {
    case "device.status": return `status ${String(d.previous ?? "unknown")} → ${String(d.status)} (${String(d.reason ?? "")})`;
    case "device.metrics": return `${Array.isArray(d.samples) ? d.samples.length : 0} metrics sample(s) stored`;
    case "command.updated": return `command ${String(d.command_type ?? "")} ${String(d.status ?? "")}`.replace(/\s+/g, " ");
    case "job.updated": return `job ${String(d.job_id ?? "")} ${String(d.status ?? "")}`;
    case "agent.state": return `agent state ${String(d.state ?? "")}`;
    default: return e.type;
  }
}

function statusBlock(device: DeviceRow, a: Assessment): StatusBlock {
  return {
    device_id: device.deviceId, site_id: device.siteId, name: device.name, status: device.status, last_seen: device.lastSeen,
    risk_score: a.risk.risk_score, risk_level: a.risk.risk_level, risk_explanation: a.risk.explanation, recommendations: a.risk.recommendations,
    anomaly_score: a.anomaly.score, anomaly_explanation: a.anomaly.explanation,
    recent_events: a.recent_events.map((e) => ({ type: e.type, at: e.at, summary: summariseEvent(e) })),
  };
}

const pct = (v: number | null) => (v === null ? "n/a" : v.toFixed(2));

function statusLines(blocks: StatusBlock[]): string[] {
  return blocks.map((b) => {
    const events = b.recent_events.length ? ` Last events: ${b.recent_events.map((e) => `${e.at} ${e.summary}`).join("; ")}.` : " No recent events.";
    return `- ${b.device_id} (${b.name}, site ${b.site_id}): ${b.status}${b.last_seen ? `, last seen ${b.last_seen}` : ""}. ` +
      `Failure risk ${b.risk_level} (${pct(b.risk_score)}): ${b.risk_explanation} Anomaly score ${pct(b.anomaly_score)}: ${b.anomaly_explanation}${events}`;
  });
}

export type QueryInput = { query: string; device_id?: string; site_id?: string };

/**
 * Answers a question from the records. The text is only ever matched against patterns and looked up
 * as ids: it is data, never instructions, so nothing it says is done.
 */
export async function answerQuery(env: Env, db: Db, user: AuthUser, input: QueryInput, request?: Request) {
  const persona = (await getPersona(db, user)).mode;
  const intent = parseIntent(input.query);
  const sources: Source[] = [];

  // Devices: the one named in the body (checked like a path's), then the ones named in the text.
  const named: DeviceRow[] = input.device_id ? [await viewableDevice(db, user, input.device_id, request)] : [];
  if (input.site_id) await authorizeSite(db, user, input.site_id, "viewer", request);
  for (const d of await namedVisibleDevices(db, user, input.query)) if (!named.some((n) => n.deviceId === d.deviceId)) named.push(d);
  const focus = named.slice(0, MAX_NAMED_DEVICES);

  const blocks = await Promise.all(focus.map(async (device) => {
    const assessment = await siteHub(env, device.siteId).aiDeviceAssessment(toAgentDevice(device), DEFAULT_RISK_WINDOW_H * 3_600_000, STATUS_EVENTS);
    sources.push({ type: "device", id: device.deviceId, detail: `devices row; status ${device.status}` });
    sources.push({ type: "hub_assessment", id: device.deviceId, detail: `risk and anomaly from ${assessment.risk.data_points} stored samples in site ${device.siteId}'s hub; ${assessment.recent_events.length} recent events` });
    return { block: statusBlock(device, assessment), assessment };
  }));

  const history = await recentExchanges(db, user);
  const lines: string[] = [];
  if (blocks.length) lines.push("CURRENT SYSTEM STATUS", ...statusLines(blocks.map((b) => b.block)), "");

  const scopeSites = focus.length ? [] : input.site_id ? [input.site_id] : await sitesWithDevices(db, user, MAX_QUERY_SITES);
  const fleet = scopeSites.length ? await fleetFacts(env, db, scopeSites, intent) : undefined;
  if (fleet) sources.push(...fleet.sources);

  lines.push(...personaAnswer(persona, intent, blocks.map((b) => b.block), fleet, focus, input));
  if (ACTION_WORDS.test(input.query)) {
    lines.push("", "Note: the assistant only reads. It has not restarted, queued, changed or deleted anything; an operator does that through the device, command and job endpoints.");
  }
  if (history.length) sources.push({ type: "conversation", id: `user:${user.id}`, detail: `${history.length} earlier exchange(s) from the last day` });

  const response = lines.join("\n").trim();
  await remember(db, user, { query: input.query, response, intent, deviceIds: focus.map((d) => d.deviceId) });
  return {
    response, intent, persona, sources,
    context: {
      device_ids: focus.map((d) => d.deviceId),
      blocks: [
        ...(blocks.length ? [{ label: "CURRENT SYSTEM STATUS" as const, devices: blocks.map((b) => b.block) }] : []),
        { label: "CONVERSATION HISTORY" as const, exchanges: history },
      ],
    },
  };
}

type FleetFacts = {
  sites: string[];
  counts: { total: number; online: number; offline: number; error: number };
  anomalies: DeviceAnomaly[];
  risks: DeviceRiskSummary[];
  jobs: { job_id: string; site_id: string; action: string; status: string; created_at: string }[];
  sources: Source[];
};

async function fleetFacts(env: Env, db: Db, siteIds: string[], intent: Intent): Promise<FleetFacts> {
  const inSites = inArray(devices.siteId, siteIds);
  const statusRows = await db.select({ status: devices.status, n: sql<number>`count(*)` }).from(devices).where(inSites).groupBy(devices.status).all();
  const count = (s: string) => statusRows.find((r) => r.status === s)?.n ?? 0;
  const counts = { total: statusRows.reduce((t, r) => t + r.n, 0), online: count("online"), offline: count("offline"), error: count("error") };
  const anomalies = (await inBatches(siteIds, HUB_CONCURRENCY, (id) => siteHub(env, id).aiAnomalies(0.5))).flat().sort((a, b) => b.score - a.score);
  const risks = (await inBatches(siteIds, HUB_CONCURRENCY, (id) => siteHub(env, id).aiRisks(0.3, DEFAULT_RISK_WINDOW_H * 3_600_000))).flat()
    .sort((a, b) => b.risk_score - a.risk_score);
  const recentJobs = intent === "history"
    ? await db.select({ job_id: jobs.jobId, site_id: jobs.siteId, action: jobs.action, status: jobs.status, created_at: jobs.createdAt })
      .from(jobs).where(inArray(jobs.siteId, siteIds)).orderBy(desc(jobs.createdAt)).limit(5).all()
    : [];
  const sources: Source[] = [
    { type: "devices", id: siteIds.join(","), detail: `devices rows of ${siteIds.length} site(s): ${counts.total} devices` },
    { type: "hub_assessment", id: siteIds.join(","), detail: `anomalies (score ≥ 0.5) and risks (≥ 0.3) computed in each site's hub` },
    ...(intent === "history" ? [{ type: "jobs", id: siteIds.join(","), detail: `${recentJobs.length} most recent job(s)` }] : []),
  ];
  return { sites: siteIds, counts, anomalies, risks, jobs: recentJobs, sources };
}

function personaAnswer(persona: Persona, intent: Intent, blocks: StatusBlock[], fleet: FleetFacts | undefined, focus: DeviceRow[], input: QueryInput): string[] {
  if (intent === "help") {
    return [
      `Ask about a device by its id (status, health, failure risk, anomalies, recent commands and jobs) or about your fleet ("which devices are at risk?", "any anomalies?").`,
      `Persona: ${persona} (change it with POST /api/ai/mode: Maintenance, Predictive or Executive). Every answer is built from stored records and lists its sources.`,
    ];
  }
  const out: string[] = [];
  if (blocks.length) {
    for (const b of blocks) {
      if (persona === "Executive") {
        out.push(`${b.device_id}: ${b.status}, failure risk ${b.risk_level}${b.risk_score === null ? "" : ` (${pct(b.risk_score)})`}.`);
      } else if (persona === "Predictive") {
        out.push(`${b.device_id}: ${b.risk_explanation}`);
        if (b.recommendations.length) out.push(`Ahead of it: ${b.recommendations.join(" ")}`);
      } else {
        const fixes = b.recommendations.length ? b.recommendations.join(" ") : "Nothing needs fixing now.";
        out.push(`${b.device_id} (${b.status}): ${fixes}${b.anomaly_score !== null && b.anomaly_score >= 0.5 ? ` Investigate: ${b.anomaly_explanation}` : ""}`);
      }
    }
    if (intent === "history") {
      for (const b of blocks) {
        const relevant = b.recent_events.filter((e) => e.type === "command.updated" || e.type === "job.updated");
        out.push(relevant.length ? `${b.device_id} commands and jobs: ${relevant.map((e) => `${e.at} ${e.summary}`).join("; ")}.` : `${b.device_id}: no command or job events in its recent history.`);
      }
    }
    return out;
  }
  if (!fleet) {
    return [input.device_id || focus.length ? "" : "No device you can view is named, and none of your sites has devices yet."].filter(Boolean);
  }
  const { counts, anomalies, risks } = fleet;
  const scope = `${fleet.sites.length} site(s)`;
  const atRisk = risks.filter((r) => r.risk_score >= 0.6);
  if (persona === "Executive" || intent === "status" || intent === "comparison") {
    out.push(`Across ${scope}: ${counts.total} devices, ${counts.online} online, ${counts.offline} offline, ${counts.error} in error; ${anomalies.length} with a current anomaly; ${atRisk.length} at high failure risk.`);
  }
  if (intent === "anomalies" || (persona === "Maintenance" && intent !== "risk")) {
    out.push(anomalies.length
      ? `Anomalies: ${anomalies.slice(0, 5).map((a) => `${a.device_id} (${a.score.toFixed(2)}: ${a.reasons[0]?.message ?? a.explanation})`).join("; ")}.`
      : "No device shows a current anomaly.");
  }
  if (intent === "risk" || intent === "comparison" || persona === "Predictive") {
    out.push(risks.length
      ? `Highest failure risk: ${risks.slice(0, 5).map((r) => `${r.device_id} ${r.risk_level} (${r.risk_score.toFixed(2)}${r.top_factor ? `: ${r.top_factor}` : ""})`).join("; ")}.`
      : "No device shows a raised failure risk.");
    if (persona !== "Executive") {
      const advice = risks.flatMap((r) => r.recommendations.map((x) => `${r.device_id}: ${x}`)).slice(0, 3);
      if (advice.length) out.push(`Recommended: ${advice.join(" ")}`);
    }
  }
  if (intent === "history") {
    out.push(fleet.jobs.length ? `Recent jobs: ${fleet.jobs.map((j) => `${j.job_id} ${j.action} ${j.status} (${j.created_at}, site ${j.site_id})`).join("; ")}.` : "No jobs on these sites yet.");
  }
  if (intent === "health" && !out.length) {
    out.push(`Across ${scope}: ${counts.online} of ${counts.total} devices online, ${counts.error} in error, ${anomalies.length} with a current anomaly.`);
  }
  return out;
}
