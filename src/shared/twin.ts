/**
 * Device twins: the pure document rules shared by the Worker (validation) and the site hub
 * (merging, layering, deltas). A twin document is a JSON object; patches follow JSON merge patch
 * (RFC 7396): objects merge recursively, `null` removes a key, everything else (arrays included)
 * replaces. docs/twins.md describes the model.
 */
import { z } from "@hono/zod-openapi";

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

/** At most this many bytes (UTF-8 JSON) per document: desired, reported, a template, or a patch. */
export const TWIN_MAX_BYTES = 16 * 1024;
/** At most this many levels of nested objects and arrays (the document itself is level 1). */
export const TWIN_MAX_DEPTH = 8;
/** A key: a letter or underscore, then letters, digits, `_`, `-` or `.`; 1–64 characters. */
export const TWIN_KEY_PATTERN = /^[A-Za-z_][A-Za-z0-9_.-]{0,63}$/;
/** A segment names a device type within a tenant. */
export const TWIN_SEGMENT_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

export const isJsonObject = (value: unknown): value is JsonObject =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** RFC 7396: the result of applying `patch` to `target` (neither is modified). */
export function mergePatch(target: JsonValue | undefined, patch: JsonValue): JsonValue {
  if (!isJsonObject(patch)) return clone(patch);
  const result: JsonObject = isJsonObject(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete result[key];
    else result[key] = mergePatch(result[key], value);
  }
  return result;
}

/** A document patched: always an object, since a twin document's patch must be one. */
export const patchDocument = (document: JsonObject, patch: JsonObject): JsonObject => mergePatch(document, patch) as JsonObject;

function clone(value: JsonValue): JsonValue {
  if (Array.isArray(value)) return value.map(clone);
  if (isJsonObject(value)) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, clone(v)]));
  return value;
}

/** Structural equality; the order of object keys does not matter. */
export function jsonEqual(a: JsonValue | undefined, b: JsonValue | undefined): boolean {
  if (a === b) return true;
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((v, i) => jsonEqual(v, b[i]));
  }
  if (isJsonObject(a) && isJsonObject(b)) {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => k in b && jsonEqual(a[k], b[k]));
  }
  return false;
}

/**
 * What `desired` asks for that `reported` does not have, as a merge patch: applied to `reported`
 * it makes every desired key match. Nested objects are compared key by key; keys the device reports
 * that nobody desires are not a delta.
 */
export function twinDelta(desired: JsonObject, reported: JsonObject): JsonObject {
  const delta: JsonObject = {};
  for (const [key, want] of Object.entries(desired)) {
    const have = reported[key];
    if (isJsonObject(want) && isJsonObject(have)) {
      const inner = twinDelta(want, have);
      if (Object.keys(inner).length) delta[key] = inner;
    } else if (!jsonEqual(want, have)) {
      delta[key] = clone(want);
    }
  }
  return delta;
}

/** Top-level keys whose value differs between two documents (added, removed or changed). */
export function changedKeys(before: JsonObject, after: JsonObject): string[] {
  const keys = new Set([...Object.keys(before), ...Object.keys(after)]);
  return [...keys].filter((k) => !jsonEqual(before[k], after[k])).sort();
}

export interface TwinLayer {
  /** `segment:<name>`, `site` or `device`. */
  source: string;
  document: JsonObject;
}

/**
 * The effective desired document: each layer merged over the previous (later wins), and for each
 * leaf, as a JSON pointer, the layer its value came from.
 */
export function layerDocuments(layers: TwinLayer[]): { effective: JsonObject; sources: Record<string, string> } {
  let effective: JsonObject = {};
  for (const layer of layers) effective = patchDocument(effective, layer.document);
  const sources: Record<string, string> = {};
  for (const layer of layers) recordSources(layer.document, "", layer.source, sources);
  // A later layer that replaced an object with a scalar (or the reverse) leaves stale pointers behind.
  for (const pointer of Object.keys(sources)) if (!pointerResolves(effective, pointer)) delete sources[pointer];
  return { effective, sources };
}

function recordSources(document: JsonObject, prefix: string, source: string, sources: Record<string, string>) {
  for (const [key, value] of Object.entries(document)) {
    const pointer = `${prefix}/${key}`;
    // A layer that sets a whole object or scalar here owns everything below it.
    if (isJsonObject(value)) {
      // Merging an object keeps what earlier layers set below it; an empty one is a value of its own only where nothing is.
      delete sources[pointer];
      const below = Object.keys(sources).some((existing) => existing.startsWith(`${pointer}/`));
      if (!Object.keys(value).length && !below) sources[pointer] = source;
      recordSources(value, pointer, source, sources);
    } else {
      for (const existing of Object.keys(sources)) if (existing === pointer || existing.startsWith(`${pointer}/`)) delete sources[existing];
      sources[pointer] = source;
    }
  }
}

function pointerResolves(document: JsonObject, pointer: string): boolean {
  let node: JsonValue | undefined = document;
  for (const part of pointer.split("/").slice(1)) {
    if (!isJsonObject(node) || !(part in node)) return false;
    node = node[part];
  }
  return true;
}

export const documentBytes = (value: JsonValue) => new TextEncoder().encode(JSON.stringify(value)).length;

export interface DocumentProblem {
  path: (string | number)[];
  msg: string;
}

/**
 * Why a document or patch cannot be taken: `tooLarge` (413) or a list of problems (422: not an
 * object, nested deeper than TWIN_MAX_DEPTH, a key outside TWIN_KEY_PATTERN). `allowNull` admits
 * null values (a patch's deletions).
 */
export function documentProblems(value: unknown, { allowNull }: { allowNull: boolean }): { tooLarge: boolean; problems: DocumentProblem[] } {
  if (!isJsonObject(value)) return { tooLarge: false, problems: [{ path: [], msg: "Must be a JSON object" }] };
  const problems: DocumentProblem[] = [];
  walk(value, [], 1, allowNull, problems);
  return { tooLarge: documentBytes(value) > TWIN_MAX_BYTES, problems: problems.slice(0, 20) };
}

function walk(value: JsonValue, path: (string | number)[], depth: number, allowNull: boolean, problems: DocumentProblem[]) {
  if (value === null && !allowNull && path.length) problems.push({ path, msg: "null is only allowed in a patch, where it removes the key" });
  if (!Array.isArray(value) && !isJsonObject(value)) return;
  if (depth > TWIN_MAX_DEPTH) {
    problems.push({ path, msg: `Nested deeper than ${TWIN_MAX_DEPTH} levels` });
    return;
  }
  if (Array.isArray(value)) {
    // Inside an array null is a value, not a deletion.
    value.forEach((item, i) => walk(item, [...path, i], depth + 1, true, problems));
    return;
  }
  for (const [key, item] of Object.entries(value)) {
    if (!TWIN_KEY_PATTERN.test(key)) problems.push({ path: [...path, key], msg: "A key is 1–64 characters: a letter or _, then letters, digits, _, - or ." });
    walk(item, [...path, key], depth + 1, allowNull, problems);
  }
}

// ---- the hub's answers (parsed by src/hub/client.ts) --------------------------------------------

const JsonObjectSchema = z.record(z.string(), z.unknown()).openapi({ type: "object", additionalProperties: true });

export const TwinStateSchema = z.object({
  device_id: z.string(),
  desired: JsonObjectSchema.openapi({ description: "The device's own desired document (operators' patches)" }),
  reported: JsonObjectSchema.openapi({ description: "What the device last reported it runs" }),
  effective: JsonObjectSchema.openapi({ description: "Tenant segment template ← site template ← the device's desired (later wins)" }),
  sources: z.record(z.string(), z.string()).openapi({ description: "For each leaf of `effective`, as a JSON pointer, where it came from: `device`, `site` or `segment:<device type>`" }),
  delta: JsonObjectSchema.openapi({ description: "What `effective` asks for that `reported` lacks, as a merge patch" }),
  version: z.number().int().openapi({ description: "Version of the device's own desired document; the ETag, and what If-Match names" }),
  effective_version: z.number().int().openapi({ description: "Bumped whenever the effective document changes (from any layer); the device's `desired_version`" }),
  reported_version: z.number().int(),
  in_sync: z.boolean().openapi({ description: "The delta is empty" }),
  last_reported_at: z.string().nullable(),
  desired_updated_at: z.record(z.string(), z.string()).openapi({ description: "Per top-level key of `desired`: when it last changed" }),
  reported_updated_at: z.record(z.string(), z.string()).openapi({ description: "Per top-level key of `reported`: when it last changed" }),
  drift_since: z.string().nullable().openapi({ description: "Since when the device has not matched its effective desired state; null when in sync" }),
  segment: z.string().openapi({ description: "The tenant segment (the device type) whose template applies" }),
}).openapi("DeviceTwin");
export type TwinState = z.infer<typeof TwinStateSchema>;

export const DesiredPatchResultSchema = z.object({ twin: TwinStateSchema, changed_keys: z.array(z.string()) });
export type DesiredPatchResult = z.infer<typeof DesiredPatchResultSchema>;

export const TwinDriftSchema = z.object({
  device_id: z.string(),
  delta: JsonObjectSchema,
  delta_keys: z.array(z.string()).openapi({ description: "Top-level keys that differ" }),
  drift_since: z.string(),
  drifting_for_s: z.number().int().openapi({ description: "Seconds since the device stopped matching" }),
  last_reported_at: z.string().nullable(),
  effective_version: z.number().int(),
}).openapi("TwinDrift");
export type TwinDrift = z.infer<typeof TwinDriftSchema>;

export const TwinCountsSchema = z.object({ in_sync: z.number().int(), drifted: z.number().int() });
export type TwinCounts = z.infer<typeof TwinCountsSchema>;

/** What the Worker sends a hub when templates change: the site's whole template set and its devices. */
export interface TwinTemplateSet {
  /**
   * The sum of the set's template versions. Every write bumps one version, so a later set has a
   * larger sum: a hub keeps the set with the largest, whichever order two writers' calls arrive in.
   */
  generation: number;
  site: JsonObject | null;
  /** Segment name (device type) → the tenant's template for it. */
  segments: Record<string, JsonObject>;
}
export interface TwinDeviceSeed {
  device_id: string;
  device_type: string;
  desired: JsonObject | null;
  version: number;
}

export const TwinSyncChangeSchema = z.object({ device_id: z.string(), in_sync: z.boolean() });
export type TwinSyncChange = z.infer<typeof TwinSyncChangeSchema>;

/** The message the hub sends on a device's channel when its effective desired state changes. */
export const TwinDeltaMessageSchema = z.object({
  type: z.literal("twin.delta"),
  version: z.number().int().openapi({ description: "The new effective version (the heartbeat's `desired_version`)" }),
  desired: JsonObjectSchema.openapi({ description: "The whole effective desired document" }),
  delta: JsonObjectSchema.openapi({ description: "What differs from the device's last report, as a merge patch" }),
});
