import { and, asc, desc, eq, lt, inArray, sql, type SQL } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { agents, auditLogs, devices, rolloutSites, rollouts, sites } from "../db/schema";
import { conflict, forbidden, isUniqueViolation, notFound, unprocessable } from "../lib/errors";
import { canonicalJson, sha256Hex } from "../shared/ids";
import { auditRow } from "../shared/audit-row";
import { DEFAULT_JOB_DEADLINE_S } from "../shared/vocabulary";
import { MAX_ROLLOUT_DEVICES, ROLLOUT_DEFAULTS, generatedWaveSizes, segmentOfDeviceType } from "../shared/rollout-plan";
import type { RolloutControl, RolloutPlan, RolloutStatus, RolloutTarget } from "../shared/rollout-contract";
import { rolloutOrchestrator } from "../hub/rollouts";
import { currentDate } from "../lib/clock";
import { accessibleSiteIds, authorizeSite, authorizeTenant, siteRole, type SiteRow } from "./access";
import type { CreateRolloutInput } from "../routes/rollouts/schema";

export type RolloutRow = typeof rollouts.$inferSelect;

const newRolloutId = () => "rol-" + [...crypto.getRandomValues(new Uint8Array(6))].map((b) => b.toString(16).padStart(2, "0")).join("");

export const rolloutNotFound = (rolloutId: string) => notFound(`Rollout with ID '${rolloutId}' not found`);

/** The rollout an Idempotency-Key of this user already created, if any; the same key with another body is 422. */
async function rolloutOfIdempotencyKey(db: Db, userId: number, key: string, fingerprint: string) {
  const existing = await db.select().from(rollouts).where(and(eq(rollouts.createdBy, userId), eq(rollouts.idempotencyKey, key))).get();
  if (existing && existing.requestFingerprint !== fingerprint) {
    throw unprocessable([{ loc: ["header", "idempotency-key"], msg: "This Idempotency-Key was already used with a different request body", type: "idempotency_mismatch" }]);
  }
  return existing;
}

/** The targeted sites, after checking the caller may roll out to every one: operator on each, or owner of the tenant. */
async function targetedSites(db: Db, user: AuthUser, input: CreateRolloutInput, request?: Request): Promise<SiteRow[]> {
  if (input.tenant_id) {
    await authorizeTenant(db, user, input.tenant_id, "owner");
    const rows = await db.select().from(sites).where(and(eq(sites.tenantId, input.tenant_id), eq(sites.isActive, true))).orderBy(asc(sites.siteId)).all();
    if (!rows.length) throw unprocessable([{ loc: ["body", "tenant_id"], msg: "The tenant has no active site", type: "value_error" }]);
    return rows;
  }
  const ids = [...new Set(input.site_ids!)];
  const rows: SiteRow[] = [];
  for (const siteId of ids) rows.push((await authorizeSite(db, user, siteId, "operator", request)).site);
  return rows;
}

type Candidate = { deviceId: string; siteId: string; deviceType: string; configVersion: string | null };

/** Active devices of the sites, in site order, then by creation. */
async function activeDevicesOf(db: Db, siteIds: string[]): Promise<Candidate[]> {
  const order = new Map(siteIds.map((id, i) => [id, i]));
  const rows = await db.select({ deviceId: devices.deviceId, siteId: devices.siteId, deviceType: devices.deviceType, configVersion: agents.configVersion, createdAt: devices.createdAt, id: devices.id })
    .from(devices).leftJoin(agents, eq(agents.deviceId, devices.deviceId))
    .where(and(eq(devices.lifecycleState, "active"), sql`${devices.siteId} IN (SELECT value FROM json_each(${JSON.stringify(siteIds)}))`))
    .orderBy(asc(devices.createdAt), asc(devices.id)).all();
  return rows.sort((a, b) => order.get(a.siteId)! - order.get(b.siteId)!);
}

function matchesFilter(d: Candidate, filter: CreateRolloutInput["device_filter"]) {
  if (!filter) return true;
  if (filter.device_type && d.deviceType.toLowerCase() !== filter.device_type.toLowerCase()) return false;
  if (filter.segment && segmentOfDeviceType(d.deviceType) !== filter.segment.toLowerCase()) return false;
  if (filter.config_version_not && d.configVersion === filter.config_version_not) return false;
  return true;
}

/** Assigns each device a wave (1-based), generated or as the explicit list says; leftovers form one last wave. */
function assignWaves(targets: Candidate[], input: CreateRolloutInput, siteIds: string[]): { assigned: RolloutTarget[]; waveCount: number } {
  const assigned: RolloutTarget[] = [];
  const waves = input.waves;
  if (!Array.isArray(waves)) {
    const generated = waves ?? { canary_percent: ROLLOUT_DEFAULTS.canaryPercent, growth: ROLLOUT_DEFAULTS.growth };
    let i = 0;
    generatedWaveSizes(targets.length, generated.canary_percent, generated.growth).forEach((size, w) => {
      for (const d of targets.slice(i, i + size)) assigned.push({ deviceId: d.deviceId, siteId: d.siteId, wave: w + 1 });
      i += size;
    });
    return { assigned, waveCount: assigned.length ? assigned[assigned.length - 1].wave : 0 };
  }
  const unknown = waves.flatMap((w) => w.site_ids ?? []).filter((id) => !siteIds.includes(id));
  if (unknown.length) throw unprocessable([{ loc: ["body", "waves"], msg: `Not sites of this rollout: ${[...new Set(unknown)].slice(0, 10).join(", ")}`, type: "value_error" }]);
  const left = [...targets];
  let wave = 0;
  for (const w of waves) {
    let chosen: Candidate[];
    if (w.site_ids) {
      const set = new Set(w.site_ids);
      chosen = left.filter((d) => set.has(d.siteId));
    } else {
      chosen = left.slice(0, Math.max(1, Math.ceil((targets.length * w.percent!) / 100)));
    }
    if (!chosen.length) continue;
    wave++;
    const taken = new Set(chosen.map((d) => d.deviceId));
    for (const d of chosen) assigned.push({ deviceId: d.deviceId, siteId: d.siteId, wave });
    for (let i = left.length - 1; i >= 0; i--) if (taken.has(left[i].deviceId)) left.splice(i, 1);
  }
  if (left.length) {
    wave++;
    for (const d of left) assigned.push({ deviceId: d.deviceId, siteId: d.siteId, wave });
  }
  return { assigned, waveCount: wave };
}

/** The request with every default filled in (what `settings` shows). */
function settingsOf(input: CreateRolloutInput) {
  const generated = Array.isArray(input.waves) ? null : input.waves ?? {
    canary_percent: ROLLOUT_DEFAULTS.canaryPercent, growth: ROLLOUT_DEFAULTS.growth, soak_seconds: ROLLOUT_DEFAULTS.soakSeconds,
  };
  const budget = input.budget ?? { recovery_timeout_s: ROLLOUT_DEFAULTS.recoveryTimeoutS };
  return {
    device_filter: input.device_filter ?? null,
    payload: input.payload ?? null,
    waves: generated ?? { explicit: input.waves, soak_seconds: ROLLOUT_DEFAULTS.soakSeconds },
    abort: input.abort,
    budget: {
      max_devices_per_site: budget.max_percent_per_site === undefined ? budget.max_devices_per_site ?? ROLLOUT_DEFAULTS.maxDevicesPerSite : null,
      max_percent_per_site: budget.max_percent_per_site ?? null,
      recovery_timeout_s: budget.recovery_timeout_s,
    },
    window: input.window ?? null,
    rollback: input.rollback ?? null,
  };
}

/**
 * Checks access (before anything else happens), resolves the targeted devices, plans the waves and
 * budgets, stores the rollout (audited on each site) and hands the plan to the rollout's
 * orchestrator, which starts at once. If that hand-off fails the rollout stays scheduled and the
 * minute cron hands it over again. With an Idempotency-Key this user already used for the same body,
 * nothing happens and the rollout it created is answered.
 */
export async function createRollout(env: Env, db: Db, user: AuthUser, input: CreateRolloutInput, idempotencyKey?: string, request?: Request): Promise<{ rollout: RolloutRow; created: boolean }> {
  const fingerprint = idempotencyKey ? await sha256Hex(canonicalJson(input)) : null;
  if (idempotencyKey && fingerprint) {
    const existing = await rolloutOfIdempotencyKey(db, user.id, idempotencyKey, fingerprint);
    if (existing) return { rollout: existing, created: false };
  }
  const siteRows = await targetedSites(db, user, input, request);
  const siteIds = siteRows.map((s) => s.siteId);
  const all = await activeDevicesOf(db, siteIds);
  const targets = all.filter((d) => matchesFilter(d, input.device_filter));
  if (!targets.length) throw unprocessable([{ loc: ["body", "device_filter"], msg: "No active device of the targeted sites matches", type: "value_error" }]);
  if (targets.length > MAX_ROLLOUT_DEVICES) {
    throw unprocessable([{ loc: ["body"], msg: `The rollout would reach ${targets.length} devices; at most ${MAX_ROLLOUT_DEVICES} per rollout`, type: "value_error" }]);
  }
  const { assigned, waveCount } = assignWaves(targets, input, siteIds);
  const settings = settingsOf(input);
  const activePerSite = new Map<string, number>();
  for (const d of all) activePerSite.set(d.siteId, (activePerSite.get(d.siteId) ?? 0) + 1);
  const budgetOf = (siteId: string) => settings.budget.max_percent_per_site !== null
    ? Math.max(1, Math.floor(((activePerSite.get(siteId) ?? 0) * settings.budget.max_percent_per_site) / 100))
    : settings.budget.max_devices_per_site ?? ROLLOUT_DEFAULTS.maxDevicesPerSite;
  const rolloutId = newRolloutId();
  const { config_url, config_version, ...extra } = input.payload ?? {};
  const plan: RolloutPlan = {
    rolloutId, name: input.name, action: input.action,
    configUrl: config_url ?? null, configVersion: config_version ?? null, payload: Object.keys(extra).length ? extra : null,
    createdBy: user.email, createdByUserId: user.id,
    sites: siteRows.map((s) => ({ siteId: s.siteId, timeZone: s.timeZone, budget: budgetOf(s.siteId) })),
    targets: assigned, waveCount,
    soakSeconds: settings.waves.soak_seconds,
    abort: {
      maxFailureRate: input.abort.max_failure_rate, minExecutions: input.abort.min_executions,
      maxFailures: input.abort.max_failures, offlineCountsAsFailure: input.abort.offline_counts_as_failure,
    },
    window: input.window ? { startLocal: input.window.start_local, endLocal: input.window.end_local } : null,
    rollback: input.rollback ? { action: input.rollback.action, payload: input.rollback.payload ?? null } : null,
    executionDeadlineS: DEFAULT_JOB_DEADLINE_S,
    recoveryTimeoutS: settings.budget.recovery_timeout_s,
  };
  const createdAt = currentDate().toISOString();
  let row: RolloutRow;
  try {
    [[row]] = await db.batch([
      db.insert(rollouts).values({
        rolloutId, name: input.name, tenantId: input.tenant_id ?? null, siteIds, action: input.action, spec: settings, plan,
        status: "scheduled", totalDevices: assigned.length, createdBy: user.id, createdByEmail: user.email,
        idempotencyKey: idempotencyKey ?? null, requestFingerprint: fingerprint, createdAt, updatedAt: createdAt,
      }).returning(),
      ...siteIds.map((siteId) => db.insert(rolloutSites).values({ rolloutId, siteId })),
      ...siteIds.map((siteId) => db.insert(auditLogs).values({
        ...auditRow({
          eventType: "rollout_created", userId: user.id, siteId, request,
          description: `Rollout ${rolloutId} (${input.name}, ${input.action}) created for ${assigned.length} device(s) in ${waveCount} wave(s) over ${siteIds.length} site(s)`,
          metadata: { rollout_id: rolloutId, action: input.action, devices: assigned.length, waves: waveCount },
        }),
        createdAt,
      })),
    ]);
  } catch (error) {
    if (idempotencyKey && fingerprint && isUniqueViolation(error, "rollouts.idempotency_key")) {
      const existing = await rolloutOfIdempotencyKey(db, user.id, idempotencyKey, fingerprint);
      if (existing) return { rollout: existing, created: false };
    }
    throw error;
  }
  try {
    await rolloutOrchestrator(env, rolloutId).initialise(plan);
  } catch (error) {
    console.error(`rollout ${rolloutId}: hand-off to its orchestrator failed; the cron hands it over again`, error);
  }
  return { rollout: (await db.select().from(rollouts).where(eq(rollouts.rolloutId, rolloutId)).get()) ?? row, created: true };
}

export async function findRollout(db: Db, rolloutId: string) {
  const row = await db.select().from(rollouts).where(eq(rollouts.rolloutId, rolloutId)).get();
  if (!row) throw rolloutNotFound(rolloutId);
  return row;
}

/**
 * Who may see a rollout: anyone with a role on one of its sites (else 404, as an unknown id).
 * Who may steer it: an operator on every one of its sites, or the owner of its tenant (else 403).
 */
export async function authorizeRollout(db: Db, user: AuthUser, rolloutId: string, need: "viewer" | "operator") {
  const row = await findRollout(db, rolloutId);
  if (user.isAdmin) return row;
  const siteIds = row.siteIds as string[];
  const siteRows = await db.select().from(sites).where(sql`${sites.siteId} IN (SELECT value FROM json_each(${JSON.stringify(siteIds)}))`).all();
  const roles = await Promise.all(siteRows.map((s) => siteRole(db, user, s)));
  if (!roles.some((r) => r !== undefined)) throw rolloutNotFound(rolloutId);
  if (need === "viewer") return row;
  if (row.tenantId) {
    const owner = await authorizeTenant(db, user, row.tenantId, "owner").then(() => true, () => false);
    if (owner) return row;
  }
  const everywhere = roles.length === siteIds.length && roles.every((r) => r === "operator" || r === "owner");
  if (!everywhere) throw forbidden("The operator role on every site of the rollout is required");
  return row;
}

export async function readRollout(env: Env, row: RolloutRow) {
  return { row, progress: await rolloutOrchestrator(env, row.rolloutId).progress() };
}

/**
 * The rollout's progress stream for a user authorised to read it; an orchestrator that never got
 * its plan is handed it first (as a control does), so the stream has something to show.
 */
export async function rolloutEvents(env: Env, user: AuthUser, row: RolloutRow, lastEventId: number | undefined) {
  const client = rolloutOrchestrator(env, row.rolloutId);
  if (!(await client.progress())) await client.initialise(row.plan as RolloutPlan);
  return client.events(user.id, lastEventId);
}

/** Rollouts touching a site the caller can read (administrators: all), newest first. */
export async function listRollouts(db: Db, user: AuthUser, q: { status?: RolloutStatus; limit: number; offset: number }) {
  let visibility: SQL | undefined;
  const visible = await accessibleSiteIds(db, user);
  if (visible && !visible.length) return { rows: [], total: 0 };
  if (visible) {
    visibility = inArray(rollouts.rolloutId, db.select({ id: rolloutSites.rolloutId }).from(rolloutSites)
      .where(sql`${rolloutSites.siteId} IN (SELECT value FROM json_each(${JSON.stringify(visible)}))`));
  }
  const where = and(visibility, q.status ? eq(rollouts.status, q.status) : undefined);
  const [rows, count] = await Promise.all([
    db.select().from(rollouts).where(where).orderBy(desc(rollouts.createdAt), desc(rollouts.id)).limit(q.limit).offset(q.offset).all(),
    db.select({ n: sql<number>`count(*)` }).from(rollouts).where(where).get(),
  ]);
  return { rows, total: count?.n ?? 0 };
}

/** pause, resume, abort or promote through the orchestrator (which audits it); 409 where the status does not allow it. */
export async function controlRollout(env: Env, db: Db, user: AuthUser, row: RolloutRow, kind: RolloutControl) {
  const client = rolloutOrchestrator(env, row.rolloutId);
  if (!(await client.progress())) await client.initialise(row.plan as RolloutPlan);
  const result = await client.control(kind, { userId: user.id, email: user.email });
  if (!result.ok) throw conflict(result.detail);
  return readRollout(env, await findRollout(db, row.rolloutId));
}

// ---- cron -----------------------------------------------------------------------------------

const REDRIVE_AFTER_MS = 60_000;
const REDRIVE_PER_RUN = 50;

/**
 * The minute cron's rollout sweep: every unfinished rollout whose row has not moved for a minute
 * gets one step from its orchestrator (handed its plan again if it never got it), so a rollout whose
 * alarm was lost still moves. Idempotent.
 */
export async function runRolloutMaintenance(env: Env, db: Db, now: Date) {
  const stale = await db.select({ rolloutId: rollouts.rolloutId }).from(rollouts)
    .where(and(inArray(rollouts.status, ["scheduled", "running", "paused"]), lt(rollouts.updatedAt, new Date(now.getTime() - REDRIVE_AFTER_MS).toISOString())))
    .orderBy(asc(rollouts.updatedAt)).limit(REDRIVE_PER_RUN).all();
  const results: Record<string, RolloutStatus | null> = {};
  for (const { rolloutId } of stale) {
    try {
      const client = rolloutOrchestrator(env, rolloutId);
      results[rolloutId] = await client.drive() ?? (await client.initialise((await findRollout(db, rolloutId)).plan as RolloutPlan)).status;
    } catch (error) {
      console.error(`re-drive of rollout ${rolloutId} failed`, error);
    }
  }
  return results;
}
