/**
 * Device twins (docs/twins.md): what operators, templates and devices change. The live twin is the
 * site hub's (durable-objects/twins.ts); D1 keeps the desired documents and templates as the durable
 * record, plus each device's in_sync flag, written here from what the hub answers.
 */
import { and, eq, ne, sql } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { deviceTwins, devices, sites, twinTemplates } from "../db/schema";
import { ApiError, badRequest } from "../lib/errors";
import { siteHub } from "../hub/client";
import { recordAudit } from "./audit";
import { deviceNotFound } from "./access";
import {
  TWIN_MAX_BYTES, documentProblems, isJsonObject,
  type JsonObject, type TwinDeviceSeed, type TwinState, type TwinSyncChange, type TwinTemplateSet,
} from "../shared/twin";

/** The validated body: 413 beyond the size limit, 422 for anything else a document may not be. */
export function twinDocument(value: unknown, { patch }: { patch: boolean }): JsonObject {
  const { tooLarge, problems } = documentProblems(value, { allowNull: patch });
  if (problems.length) throw new ApiError(422, problems.map((p) => ({ loc: ["body", ...p.path], msg: p.msg, type: "value_error" })));
  if (tooLarge) throw new ApiError(413, `A twin document or patch is at most ${TWIN_MAX_BYTES / 1024} KB`);
  if (!isJsonObject(value)) throw new ApiError(422, [{ loc: ["body"], msg: "Must be a JSON object", type: "value_error" }]);
  return value;
}

/** The quoted version an ETag carries. */
export const versionTag = (version: number) => `"${version}"`;

/**
 * The version an If-Match names: required (428 without it), one strong or weak entity tag holding a
 * version number (400 otherwise).
 */
export function ifMatchVersion(header: string | undefined): number {
  if (header === undefined || header.trim() === "") {
    throw new ApiError(428, 'If-Match is required: send the ETag of the twin you read (GET the twin first), e.g. If-Match: "3"');
  }
  const match = /^\s*(?:W\/)?"(\d{1,15})"\s*$/.exec(header);
  if (!match) throw badRequest('If-Match must be one entity tag such as "3", as the twin\'s ETag gives it');
  return Number(match[1]);
}

/** Whether If-None-Match names this version (or `*`): the device already has it. */
export function noneMatch(header: string | undefined, version: number): boolean {
  if (!header) return false;
  return header.split(",").map((t) => t.trim().replace(/^W\//, "")).some((t) => t === "*" || t === versionTag(version));
}

export async function deviceTwin(env: Env, siteId: string, deviceId: string): Promise<TwinState> {
  const twin = await siteHub(env, siteId).twin(deviceId);
  if (!twin) throw deviceNotFound(deviceId);
  return twin;
}

/** An operator's merge patch of the device's own desired document, at the version If-Match names. */
export async function patchDesired(
  env: Env, db: Db, user: AuthUser, device: { deviceId: string; siteId: string }, ifMatch: number, body: unknown, request: Request,
): Promise<TwinState> {
  const patch = twinDocument(body, { patch: true });
  const result = await siteHub(env, device.siteId).patchTwinDesired(device.deviceId, ifMatch, patch);
  if (!result) throw deviceNotFound(device.deviceId);
  const { twin, changed_keys } = result;
  if (!changed_keys.length) return twin;
  await recordDesired(db, device.siteId, twin);
  await recordAudit(db, {
    eventType: "config_updated",
    description: `Desired state of device ${device.deviceId} changed: ${changed_keys.join(", ")}`,
    userId: user.id,
    siteId: device.siteId,
    metadata: { device_id: device.deviceId, changed_keys, version: twin.version, effective_version: twin.effective_version },
    request,
  });
  return twin;
}

/** Writes the desired document unless D1 already holds a later version (two writers finishing out of order). */
async function recordDesired(db: Db, siteId: string, twin: TwinState) {
  await db.insert(deviceTwins)
    .values({ deviceId: twin.device_id, siteId, desired: JSON.stringify(twin.desired), version: twin.version, inSync: twin.in_sync })
    .onConflictDoUpdate({
      target: deviceTwins.deviceId,
      set: { desired: sql`excluded.desired`, version: sql`excluded.version`, inSync: sql`excluded.in_sync`, updatedAt: sql`strftime('%Y-%m-%dT%H:%M:%fZ','now')` },
      setWhere: sql`excluded.version > ${deviceTwins.version}`,
    });
}

/** in_sync flags the hub changed, in one statement. */
async function recordSync(db: Db, siteId: string, changes: TwinSyncChange[]) {
  if (!changes.length) return;
  await db.run(sql`INSERT INTO device_twins (device_id, site_id, in_sync)
    SELECT json_extract(value, '$.device_id'), ${siteId}, json_extract(value, '$.in_sync') FROM json_each(${JSON.stringify(changes)}) WHERE true
    ON CONFLICT(device_id) DO UPDATE SET in_sync = excluded.in_sync, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ','now')`);
}

/** The device's report of what it runs; answers the twin with the delta that remains. */
export async function reportTwin(env: Env, db: Db, device: { deviceId: string; siteId: string }, body: unknown): Promise<TwinState> {
  const patch = twinDocument(body, { patch: true });
  const result = await siteHub(env, device.siteId).patchTwinReported(device.deviceId, patch);
  if (!result) throw deviceNotFound(device.deviceId);
  if (result.in_sync_changed) await recordSync(db, device.siteId, [{ device_id: device.deviceId, in_sync: result.twin.in_sync }]);
  return result.twin;
}

// ---- templates ----------------------------------------------------------------------------------

export type TemplateScope = { scope: "site"; siteId: string } | { scope: "tenant"; tenantId: string; segment: string };

const scopeKey = (where: TemplateScope) =>
  where.scope === "site" ? { scope: "site" as const, scopeId: where.siteId, segment: "" } : { scope: "tenant" as const, scopeId: where.tenantId, segment: where.segment };

export interface TwinTemplate {
  scope: "site" | "tenant";
  scope_id: string;
  segment: string | null;
  document: JsonObject;
  version: number;
  updated_at: string | null;
}

export async function getTemplate(db: Db, where: TemplateScope): Promise<TwinTemplate> {
  const key = scopeKey(where);
  const row = await db.select().from(twinTemplates)
    .where(and(eq(twinTemplates.scope, key.scope), eq(twinTemplates.scopeId, key.scopeId), eq(twinTemplates.segment, key.segment))).get();
  return {
    scope: key.scope, scope_id: key.scopeId, segment: key.scope === "tenant" ? key.segment : null,
    document: row ? (JSON.parse(row.document) as JsonObject) : {}, version: row?.version ?? 0, updated_at: row?.updatedAt ?? null,
  };
}

/**
 * Replaces a template, audits it, and recomputes every device it reaches in its site's hub: one hub
 * call per site (a tenant's segment template reaches each of the tenant's sites).
 */
export async function putTemplate(env: Env, db: Db, user: AuthUser, where: TemplateScope, body: unknown, request: Request): Promise<TwinTemplate & { devices_recomputed: number }> {
  const document = twinDocument(body, { patch: false });
  const key = scopeKey(where);
  await db.insert(twinTemplates)
    .values({ ...key, document: JSON.stringify(document), updatedBy: user.id })
    .onConflictDoUpdate({
      target: [twinTemplates.scope, twinTemplates.scopeId, twinTemplates.segment],
      set: { document: sql`excluded.document`, version: sql`${twinTemplates.version} + 1`, updatedBy: user.id, updatedAt: sql`strftime('%Y-%m-%dT%H:%M:%fZ','now')` },
    });
  const siteIds = where.scope === "site"
    ? [where.siteId]
    : (await db.select({ siteId: sites.siteId }).from(sites).where(eq(sites.tenantId, where.tenantId)).all()).map((s) => s.siteId);
  const label = where.scope === "site" ? `site ${where.siteId}` : `tenant ${where.tenantId}, segment ${where.segment}`;
  await recordAudit(db, {
    eventType: "config_updated",
    description: `Twin template of ${label} replaced`,
    userId: user.id,
    siteId: where.scope === "site" ? where.siteId : null,
    metadata: { template_scope: key.scope, scope_id: key.scopeId, segment: key.scope === "tenant" ? key.segment : null, changed_keys: Object.keys(document).sort() },
    request,
  });
  const counts = await Promise.all(siteIds.map((siteId) => recomputeSite(env, db, siteId)));
  return { ...(await getTemplate(db, where)), devices_recomputed: counts.reduce((a, b) => a + b, 0) };
}

/** Hands one site's hub its whole template set and its devices; answers how many devices that was. */
async function recomputeSite(env: Env, db: Db, siteId: string): Promise<number> {
  const site = await db.select({ tenantId: sites.tenantId }).from(sites).where(eq(sites.siteId, siteId)).get();
  const templates = await db.select().from(twinTemplates).where(sql`(${twinTemplates.scope} = 'site' AND ${twinTemplates.scopeId} = ${siteId})
      OR (${twinTemplates.scope} = 'tenant' AND ${twinTemplates.scopeId} = ${site?.tenantId ?? null})`).all();
  const set: TwinTemplateSet = { generation: templates.reduce((sum, t) => sum + t.version, 0), site: null, segments: {} };
  for (const t of templates) {
    if (t.scope === "site") set.site = JSON.parse(t.document) as JsonObject;
    else set.segments[t.segment] = JSON.parse(t.document) as JsonObject;
  }
  const seeds: TwinDeviceSeed[] = (await db.select({ deviceId: devices.deviceId, deviceType: devices.deviceType, desired: deviceTwins.desired, version: deviceTwins.version })
    .from(devices).leftJoin(deviceTwins, eq(deviceTwins.deviceId, devices.deviceId)).where(eq(devices.siteId, siteId)).all())
    .map((d) => ({ device_id: d.deviceId, device_type: d.deviceType, desired: d.desired ? (JSON.parse(d.desired) as JsonObject) : null, version: d.version ?? 0 }));
  const changes = await siteHub(env, siteId).setTwinTemplates(set, seeds);
  await recordSync(db, siteId, changes);
  return seeds.length;
}

// ---- drift ----------------------------------------------------------------------------------------

/**
 * The site's devices whose reported state differs from their effective desired state, longest
 * first. Retired devices are left out: they will never converge, and nobody expects them to.
 */
export async function siteDrift(env: Env, db: Db, siteId: string) {
  const drift = await siteHub(env, siteId).twinDrift();
  const names = new Map((await db.select({ deviceId: devices.deviceId, name: devices.name }).from(devices)
    .where(and(eq(devices.siteId, siteId), ne(devices.lifecycleState, "retired"))).all())
    .map((d) => [d.deviceId, d.name]));
  const list = drift.filter((d) => names.has(d.device_id)).map((d) => ({ ...d, name: names.get(d.device_id)! }));
  return { site_id: siteId, drifted_devices: list.length, devices: list };
}
