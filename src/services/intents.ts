import { and, desc, eq, getTableColumns, inArray, is, lte, sql, SQL } from "drizzle-orm";
import type { SQLiteTable } from "drizzle-orm/sqlite-core";
import type { Db, Env } from "../env";
import { auditLogs, devices, enrolmentIntents, lifecycleEpochs } from "../db/schema";
import { badRequest, conflict, notFound, unprocessable, isUniqueViolation } from "../lib/errors";
import { newUuid, randomToken, sha256Hex } from "../shared/ids";
import { auditRow, type AuditInput } from "../shared/audit-row";
import { deviceNameTaken, prepareRegistration } from "./device-registry";
import { deviceCreated, rememberIssuedKey } from "./device-auth";
import { clientOfRequest, credentialReplaced, verifyThrottled } from "./credential-throttle";
import { siteHub } from "../hub/client";
import { publishSiteEvent } from "./live";
import { decoyVerify, hashSecret, verifySecret } from "./passwords";
import { currentDate } from "../lib/clock";

/**
 * Enrolment intents: an operator pre-provisions a device slot on a site and hands a one-time claim
 * token to whoever installs the terminal; the terminal claims the intent with the token and receives
 * its device id and api_key.
 *
 * Every state change is one conditional statement (keyed on the status — and, where it matters, the
 * token hash — the caller saw) inside a `db.batch`, paired with its audit row, so concurrent calls
 * cannot both win and a transition is never recorded without its audit event.
 */

export const INTENT_STATUSES = ["pending", "approved", "rejected", "consumed", "expired", "revoked"] as const;
export type IntentStatus = (typeof INTENT_STATUSES)[number];
export type IntentRow = typeof enrolmentIntents.$inferSelect;

export const DEFAULT_EXPIRES_IN_HOURS = 48;
export const MAX_EXPIRES_IN_HOURS = 8760;

export const CLAIM_THROTTLED = "Too many failed claim attempts for this enrolment intent; try again later";

/** The one answer for an unknown intent and a wrong token, so neither reveals whether the intent exists. */
export const INVALID_CLAIM = "Invalid enrolment intent or claim token";

const EXPIRABLE: IntentStatus[] = ["pending", "approved"];
const SWEEP_BATCH = 200;

export interface Actor {
  userId: number;
  request?: Request;
}

/** The public view of an intent: an explicit allow-list, so the token hash can never slip out. */
export function toIntentView(row: IntentRow) {
  return {
    intent_id: row.intentId,
    site_id: row.siteId,
    status: row.status,
    expected_device_identity: row.expectedDeviceIdentity,
    idempotency_key: row.idempotencyKey,
    expires_at: row.expiresAt,
    created_at: row.createdAt,
    updated_at: row.updatedAt,
    created_by: row.createdBy,
    device_id: row.deviceId,
    epoch_id: row.epochId,
    claimed_at: row.claimedAt,
  };
}
export type IntentView = ReturnType<typeof toIntentView>;

const intentNotFound = (intentId: string) => notFound(`Enrolment intent '${intentId}' not found`);

// --- helpers -----------------------------------------------------------------------------------

/**
 * `INSERT INTO table (<every column>) SELECT <values> <tail>`: an insert whose rows come from a SELECT,
 * so it can be made conditional (`where exists (...)`) or fed from another table (`from ... where`).
 * Values may be SQL expressions; columns without a value get their declared default, as drizzle's
 * own `values()` would. Built through `db.insert().select()` so it can join a `db.batch`.
 */
function insertSelect<T extends SQLiteTable>(db: Db, table: T, values: Record<string, unknown>, tail: SQL) {
  const columns = Object.entries(getTableColumns(table) as Record<string, any>).filter(([, col]) => !col.shouldDisableInsert());
  const expressions = columns.map(([key, col]) => {
    const value = values[key];
    if (value !== undefined) return is(value, SQL) ? value : sql.param(value, col);
    if (col.default !== undefined && col.default !== null) return is(col.default, SQL) ? col.default : sql.param(col.default, col);
    if (col.defaultFn) {
      const generated = col.defaultFn();
      return is(generated, SQL) ? generated : sql.param(generated, col);
    }
    return sql`null`;
  });
  return db.insert(table).select(sql`select ${sql.join(expressions, sql`, `)} ${tail}`);
}

/** An insert that happens only if `condition` holds at that point of the batch. */
const insertWhere = <T extends SQLiteTable>(db: Db, table: T, values: T["$inferInsert"], condition: SQL) =>
  insertSelect(db, table, values as Record<string, unknown>, sql`where ${condition}`);

const intentAudit = (input: AuditInput) => auditRow({ category: "device_management", ...input });

/** Pushes the intent's new state to the site's live channel; the change is already committed, so a
 * live-channel failure must not turn it into an error. */
async function publishIntent(env: Env, row: IntentRow, previousStatus: IntentStatus | null) {
  try {
    await publishSiteEvent(env, row.siteId, "intent.updated", { ...toIntentView(row), previous_status: previousStatus });
  } catch (error) {
    console.error("intent.updated publish failed", row.intentId, error);
  }
}

export const isExpired = (row: Pick<IntentRow, "expiresAt">, now: Date) => row.expiresAt <= now.toISOString();

async function requestFingerprint(input: { expectedDeviceIdentity: string | null; expiresInHours: number }) {
  return sha256Hex(JSON.stringify({ expected_device_identity: input.expectedDeviceIdentity, expires_in_hours: input.expiresInHours }));
}

// --- create / read ---------------------------------------------------------------------------

export interface CreateIntentInput {
  expectedDeviceIdentity?: string | null;
  expiresInHours?: number;
  idempotencyKey?: string | null;
}

export type CreateIntentResult =
  | { created: true; intent: IntentRow; claimToken: string }
  | { created: false; intent: IntentRow };

async function replayIdempotent(db: Db, siteId: string, key: string, fingerprint: string): Promise<IntentRow | undefined> {
  const existing = await db.select().from(enrolmentIntents)
    .where(and(eq(enrolmentIntents.siteId, siteId), eq(enrolmentIntents.idempotencyKey, key))).get();
  if (!existing) return undefined;
  if (existing.requestFingerprint !== fingerprint) {
    throw unprocessable([{ loc: ["body", "idempotency_key"], msg: "This idempotency key was already used on this site with a different request body", type: "idempotency_mismatch" }]);
  }
  return existing;
}

/**
 * Creates a pending intent with a fresh one-time claim token (32 random bytes, base64url; only its
 * bcrypt hash is stored). With an idempotency key already used on the site: the same body returns
 * the existing intent (`created: false`, no token — it was shown once), a different body is 422.
 */
export async function createIntent(env: Env, db: Db, siteId: string, input: CreateIntentInput, actor: Actor, now = currentDate()): Promise<CreateIntentResult> {
  const expectedDeviceIdentity = input.expectedDeviceIdentity ?? null;
  const expiresInHours = input.expiresInHours ?? DEFAULT_EXPIRES_IN_HOURS;
  const idempotencyKey = input.idempotencyKey ?? null;
  const fingerprint = await requestFingerprint({ expectedDeviceIdentity, expiresInHours });

  if (idempotencyKey) {
    const existing = await replayIdempotent(db, siteId, idempotencyKey, fingerprint);
    if (existing) return { created: false, intent: existing };
  }

  const claimToken = randomToken(32);
  const intentId = newUuid();
  const nowIso = now.toISOString();
  const expiresAt = new Date(now.getTime() + expiresInHours * 3_600_000).toISOString();
  try {
    const [[intent]] = await db.batch([
      db.insert(enrolmentIntents).values({
        intentId,
        siteId,
        status: "pending",
        expectedDeviceIdentity,
        idempotencyKey,
        requestFingerprint: idempotencyKey ? fingerprint : null,
        claimTokenHash: await hashSecret(claimToken),
        expiresAt,
        createdBy: actor.userId,
        createdAt: nowIso,
        updatedAt: nowIso,
      }).returning(),
      db.insert(auditLogs).values(intentAudit({
        eventType: "enrolment_intent_created",
        description: `Enrolment intent ${intentId} created on ${siteId}`,
        userId: actor.userId,
        siteId,
        metadata: { intent_id: intentId, expires_at: expiresAt, expected_device_identity: expectedDeviceIdentity, idempotency_key: idempotencyKey },
        request: actor.request,
      })),
    ]);
    await publishIntent(env, intent, null);
    return { created: true, intent, claimToken };
  } catch (error) {
    // A concurrent create with the same idempotency key won the unique index: answer as a replay.
    if (idempotencyKey && isUniqueViolation(error)) {
      const existing = await replayIdempotent(db, siteId, idempotencyKey, fingerprint);
      if (existing) return { created: false, intent: existing };
    }
    throw error;
  }
}

export async function listIntents(db: Db, siteId: string, query: { status?: IntentStatus; limit: number; offset: number }) {
  const where = and(eq(enrolmentIntents.siteId, siteId), query.status ? eq(enrolmentIntents.status, query.status) : undefined);
  const [rows, [{ total }]] = await Promise.all([
    db.select().from(enrolmentIntents).where(where)
      .orderBy(desc(enrolmentIntents.createdAt), desc(enrolmentIntents.id)).limit(query.limit).offset(query.offset).all(),
    db.select({ total: sql<number>`count(*)` }).from(enrolmentIntents).where(where).all(),
  ]);
  return { rows, total };
}

/** The intent if it belongs to this site; an intent of another site is 404 here, like an unknown one. */
export async function getIntent(db: Db, siteId: string, intentId: string): Promise<IntentRow> {
  const row = await db.select().from(enrolmentIntents)
    .where(and(eq(enrolmentIntents.intentId, intentId), eq(enrolmentIntents.siteId, siteId))).get();
  if (!row) throw intentNotFound(intentId);
  return row;
}

// --- expiry ------------------------------------------------------------------------------------

/**
 * Moves pending/approved intents whose expires_at has passed to `expired` (all due ones, or just one
 * intent). The audit insert and the update select the same rows with the same predicate inside one
 * batch (one transaction), so each expiry is audited exactly once and a second run finds nothing:
 * idempotent. Returns the intents this call expired.
 */
export async function expireDueIntents(env: Env, db: Db, now: Date, only?: { intentId: string }): Promise<IntentRow[]> {
  const nowIso = now.toISOString();
  const expired: IntentRow[] = [];
  for (let round = 0; round < 50; round++) {
    const due = db.select({ intentId: enrolmentIntents.intentId }).from(enrolmentIntents)
      .where(and(
        inArray(enrolmentIntents.status, EXPIRABLE),
        lte(enrolmentIntents.expiresAt, nowIso),
        only ? eq(enrolmentIntents.intentId, only.intentId) : undefined,
      ))
      .orderBy(enrolmentIntents.expiresAt, enrolmentIntents.id)
      .limit(SWEEP_BATCH);
    const [, rows] = await db.batch([
      insertSelect(db, auditLogs, {
        ...intentAudit({ eventType: "enrolment_intent_expired" }),
        description: sql`'Enrolment intent ' || ${enrolmentIntents.intentId} || ' expired'`,
        siteId: sql`${enrolmentIntents.siteId}`,
        eventMetadata: sql`json_object('intent_id', ${enrolmentIntents.intentId}, 'previous_status', ${enrolmentIntents.status}, 'expires_at', ${enrolmentIntents.expiresAt})`,
        createdAt: nowIso,
      }, sql`from ${enrolmentIntents} where ${inArray(enrolmentIntents.intentId, due)}`),
      db.update(enrolmentIntents).set({ status: "expired", updatedAt: nowIso })
        .where(inArray(enrolmentIntents.intentId, due)).returning(),
    ]);
    expired.push(...rows);
    if (rows.length < SWEEP_BATCH) break;
  }
  await Promise.all(expired.map((row) => publishIntent(env, row, null)));
  return expired;
}

/** The cron step: expire due intents. */
export async function runIntentMaintenance(env: Env, db: Db, now: Date) {
  const expired = await expireDueIntents(env, db, now);
  return { expired: expired.length };
}

/** Expires this intent first when its time has passed, whether or not the sweep ran yet. */
async function currentState(env: Env, db: Db, row: IntentRow, now: Date): Promise<IntentRow> {
  if (!EXPIRABLE.includes(row.status) || !isExpired(row, now)) return row;
  const [expired] = await expireDueIntents(env, db, now, { intentId: row.intentId });
  return expired ?? (await db.select().from(enrolmentIntents).where(eq(enrolmentIntents.intentId, row.intentId)).get()) ?? row;
}

// --- operator transitions ----------------------------------------------------------------------

const STATUS_EVENT: Record<"approved" | "rejected" | "revoked", string> = {
  approved: "enrolment_intent_approved",
  rejected: "enrolment_intent_rejected",
  revoked: "enrolment_intent_revoked",
};

interface TransitionSpec {
  from: IntentStatus[];
  /** The new status, or a function of the current one (regeneration keeps it). */
  to: IntentStatus | ((current: IntentStatus) => IntentStatus);
  eventType: string;
  description: string;
  /** Extra columns to set (e.g. a new token hash). */
  set?: Partial<typeof enrolmentIntents.$inferInsert>;
  /** The 400 answer when the current status is not in `from`. */
  refuse: (status: IntentStatus) => string;
  metadata?: Record<string, unknown>;
}

/**
 * One conditional transition: the update applies only while the intent still has the status and
 * token hash this call read and has not expired; the audit row is inserted under the very same
 * predicate just before it, so both happen or neither does.
 */
async function transition(env: Env, db: Db, siteId: string, intentId: string, spec: TransitionSpec, actor: Actor, now: Date): Promise<IntentRow> {
  const row = await currentState(env, db, await getIntent(db, siteId, intentId), now);
  if (!spec.from.includes(row.status)) throw badRequest(spec.refuse(row.status));
  const to = typeof spec.to === "function" ? spec.to(row.status) : spec.to;
  const nowIso = now.toISOString();
  const unchanged = and(
    eq(enrolmentIntents.intentId, row.intentId),
    eq(enrolmentIntents.siteId, siteId),
    eq(enrolmentIntents.status, row.status),
    eq(enrolmentIntents.claimTokenHash, row.claimTokenHash),
    sql`${enrolmentIntents.expiresAt} > ${nowIso}`,
  )!;
  const [, updated] = await db.batch([
    insertWhere(db, auditLogs, intentAudit({
      eventType: spec.eventType,
      description: spec.description,
      userId: actor.userId,
      siteId,
      metadata: { intent_id: row.intentId, previous_status: row.status, status: to, ...spec.metadata },
      request: actor.request,
    }), sql`exists (select 1 from ${enrolmentIntents} where ${unchanged})`),
    db.update(enrolmentIntents).set({ ...spec.set, status: to, updatedAt: nowIso }).where(unchanged).returning(),
  ]);
  if (!updated[0]) {
    // Changed between our read and our write (another operator, a claim, the sweep): report what it is now.
    const current = await currentState(env, db, await getIntent(db, siteId, intentId), now);
    if (!spec.from.includes(current.status)) throw badRequest(spec.refuse(current.status));
    throw conflict("The enrolment intent changed while this request was processed; try again");
  }
  await publishIntent(env, updated[0], row.status);
  return updated[0];
}

const onlyFromPending = (status: IntentStatus) =>
  status === "approved"
    ? "Status can only be changed while the intent is pending; it is approved (revoke an approved intent with POST .../revoke)"
    : `Status can only be changed while the intent is pending; it is ${status}`;

/**
 * PUT status: approved, rejected or revoked, only from pending; any other current status is 400.
 * An approved intent is withdrawn with `revokeIntent` (POST …/revoke) instead.
 */
export function changeIntentStatus(env: Env, db: Db, siteId: string, intentId: string, status: "approved" | "rejected" | "revoked", actor: Actor, now = currentDate()) {
  return transition(env, db, siteId, intentId, {
    from: ["pending"],
    to: status,
    eventType: STATUS_EVENT[status],
    description: `Enrolment intent ${intentId} ${status}`,
    refuse: onlyFromPending,
  }, actor, now);
}

/** Revoke from pending or approved (the operator UI's Revoke); revocation is final. */
export function revokeIntent(env: Env, db: Db, siteId: string, intentId: string, actor: Actor, now = currentDate()) {
  return transition(env, db, siteId, intentId, {
    from: ["pending", "approved"],
    to: "revoked",
    eventType: STATUS_EVENT.revoked,
    description: `Enrolment intent ${intentId} revoked`,
    refuse: (status) => `Only pending or approved intents can be revoked; it is ${status}`,
  }, actor, now);
}

/** A new token for a pending or approved intent; the status stays, the old token is dead at once. */
export async function regenerateIntentToken(env: Env, db: Db, siteId: string, intentId: string, actor: Actor, now = currentDate()) {
  const claimToken = randomToken(32);
  const claimTokenHash = await hashSecret(claimToken);
  const intent = await transition(env, db, siteId, intentId, {
    from: ["pending", "approved"],
    to: (current) => current,
    set: { claimTokenHash },
    eventType: "enrolment_intent_token_regenerated",
    description: `Claim token of enrolment intent ${intentId} regenerated`,
    refuse: (status) => `Only pending or approved intents can get a new claim token; it is ${status}`,
    metadata: { token_regenerated: true },
  }, actor, now);
  await credentialReplaced(env, "intent", intentId);
  return { intent, claimToken };
}

// --- claim -------------------------------------------------------------------------------------

export interface ClaimInput {
  claimToken: string;
  deviceName?: string;
  deviceType?: string;
  deviceIdentity?: string;
}

export interface ClaimResult {
  apiKey: string;
  deviceId: string;
  epochId: string;
  siteId: string;
  intent: IntentRow;
}

/** A failed claim of an existing intent is audited for its site: its operators should see attempts on it. */
async function auditClaimFailure(db: Db, intent: IntentRow, reason: string, request?: Request) {
  await db.insert(auditLogs).values(auditRow({
    eventType: "enrolment_claim_failed",
    category: "security_events",
    severity: "warning",
    description: `Failed claim of enrolment intent ${intent.intentId}: ${reason}`,
    siteId: intent.siteId,
    metadata: { intent_id: intent.intentId, reason, status: intent.status },
    request,
  }));
}

/** Why a token holder cannot claim this intent now; undefined when it is claimable. */
function claimRefusal(row: IntentRow, input: ClaimInput, now: Date): string | undefined {
  switch (row.status) {
    case "pending": return "Enrolment intent is not approved yet";
    case "rejected": return "Enrolment intent was rejected";
    case "revoked": return "Enrolment intent was revoked";
    case "consumed": return "Enrolment intent has already been claimed";
    case "expired": return "Enrolment intent has expired";
  }
  if (isExpired(row, now)) return "Enrolment intent has expired";
  if (row.expectedDeviceIdentity !== null && input.deviceIdentity !== row.expectedDeviceIdentity) {
    return "Device identity does not match the enrolment intent";
  }
  return undefined;
}

/**
 * Claims an intent (no user auth: the token is the credential).
 *
 * 1. Throttle by intent id and client address before anything else (verifyThrottled; the intent's
 *    CredentialGuard counts failures whether or not the intent exists, so a 429 says nothing about
 *    existence, and a client that has not failed on it can still claim it).
 * 2. bcrypt-verify the token against the stored hash (a decoy hash when the intent does not exist, so
 *    both cost the same); either failure is the same 400.
 * 3. Only now, to a token holder, say why the intent cannot be claimed (status, expiry, identity).
 * 4. Build the device, its api_key hash and lifecycle epoch, then commit in ONE batch: a conditional
 *    UPDATE consumes the intent only if it is still approved, unexpired and has the very hash the
 *    token was verified against (so a regeneration in between also fails), and records this
 *    device_id/epoch_id on it; the device, epoch and audit inserts run only if the intent is now
 *    consumed *by this device_id*. Exactly one of any number of concurrent claims can match the
 *    UPDATE; the others insert nothing.
 */
export async function claimIntent(env: Env, db: Db, intentId: string, input: ClaimInput, request?: Request, now = currentDate()): Promise<ClaimResult> {
  let row: IntentRow | undefined;
  const tokenOk = await verifyThrottled(env, { kind: "intent", id: intentId, client: clientOfRequest(request), refusal: CLAIM_THROTTLED }, async () => {
    row = await db.select().from(enrolmentIntents).where(eq(enrolmentIntents.intentId, intentId)).get();
    return row ? verifySecret(input.claimToken, row.claimTokenHash) : decoyVerify(input.claimToken);
  });
  if (!row || !tokenOk) {
    if (row) await auditClaimFailure(db, row, "invalid_token", request);
    throw badRequest(INVALID_CLAIM);
  }

  const fail = async (current: IntentRow, reason: string): Promise<never> => {
    await auditClaimFailure(db, current, reason, request);
    throw badRequest(reason);
  };

  const state = await currentState(env, db, row, now);
  const refusal = claimRefusal(state, input, now);
  if (refusal) return fail(state, refusal);

  // Device names are unique per site (as for every other enrolment path): a name the device asked
  // for must be free; a name derived from its identity falls back to the generated device id.
  let name = input.deviceName;
  if (name && (await deviceNameTaken(db, row.siteId, name))) return fail(state, `A device named '${name}' already exists in this site`);
  if (!name) {
    const derived = input.deviceIdentity ?? row.expectedDeviceIdentity ?? undefined;
    if (derived && !(await deviceNameTaken(db, row.siteId, derived))) name = derived;
  }

  const prepared = await prepareRegistration({
    siteId: row.siteId,
    name,
    deviceType: input.deviceType,
    enrollmentMethod: "pre-provisioned",
    intentId: row.intentId,
    createdBy: row.createdBy,
  });
  const nowIso = now.toISOString();
  const consumedByThisClaim = sql`exists (select 1 from ${enrolmentIntents} where ${enrolmentIntents.intentId} = ${row.intentId}
    and ${enrolmentIntents.status} = 'consumed' and ${enrolmentIntents.deviceId} = ${prepared.deviceId})`;

  const [consumed] = await db.batch([
    db.update(enrolmentIntents)
      .set({ status: "consumed", deviceId: prepared.deviceId, epochId: prepared.epochId, claimedAt: nowIso, updatedAt: nowIso })
      .where(and(
        eq(enrolmentIntents.intentId, row.intentId),
        eq(enrolmentIntents.status, "approved"),
        eq(enrolmentIntents.claimTokenHash, row.claimTokenHash),
        sql`${enrolmentIntents.expiresAt} > ${nowIso}`,
      ))
      .returning(),
    insertWhere(db, devices, prepared.device, consumedByThisClaim),
    insertWhere(db, lifecycleEpochs, prepared.epoch, consumedByThisClaim),
    insertWhere(db, auditLogs, auditRow({
      eventType: "device_registered",
      description: `Device ${prepared.deviceId} registered (pre-provisioned)`,
      siteId: row.siteId,
      deviceId: prepared.deviceId,
      metadata: { enrollment_method: "pre-provisioned", device_source: "real", epoch_id: prepared.epochId, device_type: prepared.device.deviceType, intent_id: row.intentId },
      request,
    }), consumedByThisClaim),
    insertWhere(db, auditLogs, intentAudit({
      eventType: "enrolment_intent_consumed",
      description: `Enrolment intent ${row.intentId} claimed by device ${prepared.deviceId}`,
      siteId: row.siteId,
      deviceId: prepared.deviceId,
      metadata: { intent_id: row.intentId, previous_status: "approved", status: "consumed", epoch_id: prepared.epochId, device_identity: input.deviceIdentity ?? null },
      request,
    }), consumedByThisClaim),
  ]);

  const intent = consumed[0];
  if (!intent) {
    // Another claim, a regeneration, a revocation or expiry got there first.
    const current = await db.select().from(enrolmentIntents).where(eq(enrolmentIntents.intentId, intentId)).get();
    if (!current || current.claimTokenHash !== row.claimTokenHash) return fail(current ?? row, INVALID_CLAIM);
    return fail(current, claimRefusal(await currentState(env, db, current, now), input, now) ?? "Enrolment intent changed during the claim; try again");
  }
  // Like every other key issue: this isolate knows the device and trusts its key without a first bcrypt check.
  deviceCreated(prepared.deviceId, intent.siteId);
  await rememberIssuedKey(prepared.deviceId, prepared.apiKey!, prepared.device.apiKeyHash!);
  await siteHub(env, intent.siteId).rosterChanged(prepared.deviceId);
  await publishIntent(env, intent, "approved");
  return { apiKey: prepared.apiKey!, deviceId: prepared.deviceId, epochId: prepared.epochId, siteId: intent.siteId, intent };
}
