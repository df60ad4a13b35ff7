import { and, asc, desc, eq, lt, sql } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { auditArchives, auditLogs, auditRetentionPolicy, auditRetentionRuns } from "../db/schema";
import { auditRow } from "../shared/audit-row";
import { DAY_MS } from "../shared/rollups";
import { currentDate } from "../lib/clock";
import { conflict, notFound, unprocessable } from "../lib/errors";
import { exportedEvent } from "./audit-export";

/** R2 keys of the archives start with this; the rest of the key is the archive id. */
export const ARCHIVE_KEY_PREFIX = "audit/";
/** Events one archive object holds at most, and its estimated size before compression. */
export const ARCHIVE_OBJECT_MAX_EVENTS = 1_000;
export const ARCHIVE_OBJECT_MAX_BYTES = 4 * 1024 * 1024;
/** Archive objects one run writes at most; the next run goes on where it stopped. */
export const ARCHIVE_MAX_OBJECTS_PER_RUN = 10;
/** Rows one DELETE removes, and DELETEs per run. */
export const AUDIT_DELETE_BATCH_ROWS = 2_000;
export const AUDIT_DELETE_MAX_BATCHES = 10;
/** How long the record of a run is kept. */
export const RETENTION_RUN_KEEP_DAYS = 30;
/** Bounds of the policy's day counts. */
export const RETENTION_MAX_DAYS = 3_650;

export interface RetentionPolicy {
  retention_days: number;
  archive_after_days: number | null;
  compress_archives: boolean;
  encryption_required: boolean;
  updated_by: number | null;
  updated_at: string;
}

export type RetentionPolicyInput = Pick<RetentionPolicy, "retention_days" | "archive_after_days" | "compress_archives" | "encryption_required">;

export async function getRetentionPolicy(db: Db): Promise<RetentionPolicy | null> {
  const row = await db.select().from(auditRetentionPolicy).where(eq(auditRetentionPolicy.id, 1)).get();
  if (!row) return null;
  return {
    retention_days: row.retentionDays,
    archive_after_days: row.archiveAfterDays,
    compress_archives: row.compressArchives,
    encryption_required: row.encryptionRequired,
    updated_by: row.updatedBy,
    updated_at: row.updatedAt,
  };
}

export type ArchiveKeyState = "configured" | "missing" | "invalid";

/** The AES-256 key from the secret: base64 of exactly 32 bytes. */
function archiveKeyBytes(secret: string | undefined): { state: ArchiveKeyState; bytes?: Uint8Array } {
  if (!secret) return { state: "missing" };
  try {
    const bytes = Uint8Array.from(atob(secret.trim()), (ch) => ch.charCodeAt(0));
    return bytes.byteLength === 32 ? { state: "configured", bytes } : { state: "invalid" };
  } catch {
    return { state: "invalid" };
  }
}

export const archiveKeyState = (env: Pick<Env, "AUDIT_ARCHIVE_KEY">) => archiveKeyBytes(env.AUDIT_ARCHIVE_KEY).state;

async function archiveCryptoKey(env: Pick<Env, "AUDIT_ARCHIVE_KEY">, usage: "encrypt" | "decrypt") {
  const { state, bytes } = archiveKeyBytes(env.AUDIT_ARCHIVE_KEY);
  if (!bytes) throw new Error(`AUDIT_ARCHIVE_KEY is ${state === "missing" ? "not set" : "not base64 of 32 bytes"}`);
  return crypto.subtle.importKey("raw", bytes, "AES-GCM", false, [usage]);
}

/**
 * Stores the policy and audits the change as `config_updated` in one batch. Refuses (422, nothing
 * stored) an archive age beyond the retention, and encryption without a usable key.
 */
export async function setRetentionPolicy(db: Db, env: Pick<Env, "AUDIT_ARCHIVE_KEY">, user: AuthUser, input: RetentionPolicyInput, request: Request) {
  if (input.archive_after_days !== null && input.archive_after_days > input.retention_days) {
    throw unprocessable([{ loc: ["body", "archive_after_days"], msg: "archive_after_days must not exceed retention_days: events are archived before they are deleted", type: "value_error" }]);
  }
  if (input.encryption_required) {
    if (input.archive_after_days === null) {
      throw unprocessable([{ loc: ["body", "encryption_required"], msg: "encryption_required needs archiving (archive_after_days)", type: "value_error" }]);
    }
    const state = archiveKeyState(env);
    if (state !== "configured") {
      throw unprocessable([{
        loc: ["body", "encryption_required"],
        msg: state === "missing"
          ? "Archives cannot be encrypted: no key is configured (set the AUDIT_ARCHIVE_KEY secret to base64 of 32 random bytes)"
          : "Archives cannot be encrypted: AUDIT_ARCHIVE_KEY is not base64 of 32 bytes",
        type: "value_error",
      }]);
    }
  }
  const previous = await getRetentionPolicy(db);
  const updatedAt = currentDate().toISOString();
  const values = {
    retentionDays: input.retention_days, archiveAfterDays: input.archive_after_days, compressArchives: input.compress_archives,
    encryptionRequired: input.encryption_required, updatedBy: user.id, updatedAt,
  };
  const strip = (p: RetentionPolicy | null) => p && {
    retention_days: p.retention_days, archive_after_days: p.archive_after_days, compress_archives: p.compress_archives, encryption_required: p.encryption_required,
  };
  await db.batch([
    db.insert(auditRetentionPolicy).values({ id: 1, ...values }).onConflictDoUpdate({ target: auditRetentionPolicy.id, set: values }),
    db.insert(auditLogs).values(auditRow({
      eventType: "config_updated", description: "Audit retention policy changed", userId: user.id, request,
      metadata: { setting: "audit_retention", previous: strip(previous), current: strip({ ...input, updated_by: user.id, updated_at: updatedAt }) },
    })),
  ]);
  return (await getRetentionPolicy(db))!;
}

export interface RetentionRunResult {
  trigger: "cron" | "optimize";
  started_at: string;
  finished_at: string;
  archived_events: number;
  archive_objects: number;
  deleted_events: number;
  error: string | null;
}

const estimatedBytes = sql<number>`coalesce(length(CAST(${auditLogs.eventMetadata} AS BLOB)), 0) + coalesce(length(CAST(${auditLogs.description} AS BLOB)), 0)
  + coalesce(length(CAST(${auditLogs.userAgent} AS BLOB)), 0) + 512`;

async function gzipBytes(bytes: Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await new Response(new Blob([bytes]).stream().pipeThrough(new CompressionStream("gzip"))).arrayBuffer());
}

/** AES-256-GCM: a random 12-byte IV, then the ciphertext with its tag. */
async function encrypt(env: Pick<Env, "AUDIT_ARCHIVE_KEY">, plain: Uint8Array): Promise<Uint8Array> {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const sealed = new Uint8Array(await crypto.subtle.encrypt({ name: "AES-GCM", iv }, await archiveCryptoKey(env, "encrypt"), plain));
  const out = new Uint8Array(iv.byteLength + sealed.byteLength);
  out.set(iv);
  out.set(sealed, iv.byteLength);
  return out;
}

async function decrypt(env: Pick<Env, "AUDIT_ARCHIVE_KEY">, sealed: Uint8Array): Promise<Uint8Array<ArrayBuffer>> {
  return new Uint8Array(await crypto.subtle.decrypt({ name: "AES-GCM", iv: sealed.slice(0, 12) }, await archiveCryptoKey(env, "decrypt"), sealed.slice(12)));
}

/**
 * Writes the oldest not-yet-archived events before the cutoff to one archive object (events of one
 * UTC day, bounded in count and size), then marks them archived. The object's name comes from its
 * day and first event, so a run interrupted between the write and the marking writes the same
 * object again next time. Returns how many events went, or 0 when nothing is due.
 */
async function archiveOneObject(env: Env, db: Db, policy: RetentionPolicy, cutoff: string): Promise<number> {
  const candidates = await db.select({ id: auditLogs.id, createdAt: auditLogs.createdAt, bytes: estimatedBytes }).from(auditLogs)
    .where(and(sql`${auditLogs.archivedAt} IS NULL`, lt(auditLogs.createdAt, cutoff)))
    .orderBy(asc(auditLogs.createdAt), asc(auditLogs.id)).limit(ARCHIVE_OBJECT_MAX_EVENTS).all();
  if (!candidates.length) return 0;
  const day = candidates[0].createdAt.slice(0, 10);
  const ids: number[] = [];
  for (let used = 0, i = 0; i < candidates.length && candidates[i].createdAt.startsWith(day); i++) {
    used += candidates[i].bytes;
    if (ids.length > 0 && used > ARCHIVE_OBJECT_MAX_BYTES) break;
    ids.push(candidates[i].id);
  }
  const idList = JSON.stringify(ids);
  const rows = await db.select().from(auditLogs).where(sql`${auditLogs.id} IN (SELECT value FROM json_each(${idList}))`)
    .orderBy(asc(auditLogs.createdAt), asc(auditLogs.id)).all();
  let body = new TextEncoder().encode(rows.map((r) => `${JSON.stringify(exportedEvent(r))}\n`).join(""));
  if (policy.compress_archives) body = await gzipBytes(body);
  if (policy.encryption_required) body = await encrypt(env, body);
  const archiveId = `${day}-${rows[0].id}.ndjson${policy.compress_archives ? ".gz" : ""}${policy.encryption_required ? ".enc" : ""}`;
  await env.AUDIT_ARCHIVE.put(`${ARCHIVE_KEY_PREFIX}${archiveId}`, body, {
    httpMetadata: { contentType: policy.encryption_required ? "application/octet-stream" : policy.compress_archives ? "application/gzip" : "application/x-ndjson" },
    customMetadata: { day, events: String(rows.length), first_event_id: String(rows[0].id), last_event_id: String(rows[rows.length - 1].id) },
  });
  const archive = {
    day, firstEventId: rows[0].id, lastEventId: rows[rows.length - 1].id, events: rows.length, bytes: body.byteLength,
    compressed: policy.compress_archives, encrypted: policy.encryption_required, createdAt: currentDate().toISOString(),
  };
  await db.batch([
    db.insert(auditArchives).values({ archiveId, ...archive }).onConflictDoUpdate({ target: auditArchives.archiveId, set: archive }),
    db.update(auditLogs).set({ archivedAt: archive.createdAt }).where(sql`${auditLogs.id} IN (SELECT value FROM json_each(${idList}))`),
  ]);
  return rows.length;
}

/** Deletes events older than the retention, oldest first, in bounded batches; with archiving on, only archived ones. */
async function deleteExpired(d1: D1Database, policy: RetentionPolicy, now: Date): Promise<number> {
  const cutoff = new Date(now.getTime() - policy.retention_days * DAY_MS).toISOString();
  const archivedOnly = policy.archive_after_days !== null ? "AND archived_at IS NOT NULL" : "";
  let deleted = 0;
  for (let batch = 0; batch < AUDIT_DELETE_MAX_BATCHES; batch++) {
    const { meta } = await d1.prepare(
      `DELETE FROM audit_logs WHERE rowid IN (
         SELECT rowid FROM audit_logs WHERE created_at < ?1 ${archivedOnly} ORDER BY created_at LIMIT ${AUDIT_DELETE_BATCH_ROWS})`,
    ).bind(cutoff).run();
    deleted += meta.changes;
    if (meta.changes < AUDIT_DELETE_BATCH_ROWS) break;
  }
  return deleted;
}

const message = (error: unknown) => (error instanceof Error ? error.message : String(error)).slice(0, 500);

/**
 * One retention run: archives what is older than `archive_after_days`, then deletes what is older
 * than `retention_days` (never an event that should have been archived and was not). Bounded per
 * run; a run that did something or failed is recorded. No policy: nothing happens (null).
 */
export async function runAuditRetention(env: Env, db: Db, now: Date, trigger: RetentionRunResult["trigger"]): Promise<RetentionRunResult | null> {
  const policy = await getRetentionPolicy(db);
  if (!policy) return null;
  const result: RetentionRunResult = {
    trigger, started_at: now.toISOString(), finished_at: now.toISOString(), archived_events: 0, archive_objects: 0, deleted_events: 0, error: null,
  };
  if (policy.archive_after_days !== null) {
    const cutoff = new Date(now.getTime() - policy.archive_after_days * DAY_MS).toISOString();
    try {
      for (let i = 0; i < ARCHIVE_MAX_OBJECTS_PER_RUN; i++) {
        const events = await archiveOneObject(env, db, policy, cutoff);
        if (!events) break;
        result.archived_events += events;
        result.archive_objects++;
      }
    } catch (error) {
      result.error = `archiving failed: ${message(error)}`;
    }
  }
  try {
    result.deleted_events = await deleteExpired(env.DB, policy, now);
  } catch (error) {
    result.error = [result.error, `deleting failed: ${message(error)}`].filter(Boolean).join("; ");
  }
  result.finished_at = new Date(Math.max(now.getTime(), currentDate().getTime())).toISOString();
  if (result.archived_events || result.deleted_events || result.error || trigger === "optimize") {
    await db.insert(auditRetentionRuns).values({
      trigger, startedAt: result.started_at, finishedAt: result.finished_at, archivedEvents: result.archived_events,
      archiveObjects: result.archive_objects, deletedEvents: result.deleted_events, error: result.error,
    });
    const forget = new Date(now.getTime() - RETENTION_RUN_KEEP_DAYS * DAY_MS).toISOString();
    await db.delete(auditRetentionRuns).where(lt(auditRetentionRuns.startedAt, forget));
  }
  if (result.error && trigger === "cron") throw new Error(result.error);
  return result;
}

export async function lastRetentionRun(db: Db): Promise<RetentionRunResult | null> {
  const row = await db.select().from(auditRetentionRuns).orderBy(desc(auditRetentionRuns.startedAt), desc(auditRetentionRuns.id)).limit(1).get();
  return row ? {
    trigger: row.trigger, started_at: row.startedAt, finished_at: row.finishedAt, archived_events: row.archivedEvents,
    archive_objects: row.archiveObjects, deleted_events: row.deletedEvents, error: row.error,
  } : null;
}

export const toArchiveView = (r: typeof auditArchives.$inferSelect) => ({
  archive_id: r.archiveId, day: r.day, first_event_id: r.firstEventId, last_event_id: r.lastEventId, events: r.events,
  bytes: r.bytes, compressed: r.compressed, encrypted: r.encrypted, created_at: r.createdAt,
});

export async function listArchives(db: Db, query: { limit: number; offset: number; day?: string }) {
  const where = query.day ? eq(auditArchives.day, query.day) : undefined;
  const [rows, [{ total }]] = await Promise.all([
    db.select().from(auditArchives).where(where).orderBy(desc(auditArchives.day), desc(auditArchives.firstEventId)).limit(query.limit).offset(query.offset).all(),
    db.select({ total: sql<number>`count(*)` }).from(auditArchives).where(where).all(),
  ]);
  return { archives: rows.map(toArchiveView), total };
}

/** An archive's content as written before encryption: NDJSON, gzip-compressed when the archive is. */
export async function readArchive(env: Env, db: Db, archiveId: string) {
  const archive = await db.select().from(auditArchives).where(eq(auditArchives.archiveId, archiveId)).get();
  const object = archive && await env.AUDIT_ARCHIVE.get(`${ARCHIVE_KEY_PREFIX}${archiveId}`);
  if (!archive || !object) throw notFound("No such archive");
  let body: Uint8Array<ArrayBuffer> = new Uint8Array(await object.arrayBuffer());
  if (archive.encrypted) {
    if (archiveKeyState(env) !== "configured") throw conflict("The archive is encrypted and AUDIT_ARCHIVE_KEY is not configured");
    try {
      body = await decrypt(env, body);
    } catch {
      throw conflict("The archive could not be decrypted with the configured AUDIT_ARCHIVE_KEY (was the key changed?)");
    }
  }
  return {
    body,
    contentType: archive.compressed ? "application/gzip" : "application/x-ndjson",
    fileName: `audit-${archiveId.replace(/\.enc$/, "")}`,
  };
}
