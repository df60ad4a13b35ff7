/**
 * Device twins in the site's hub: each device's own desired document, what it reported, the
 * effective desired document (tenant segment template ← site template ← device desired) with its
 * sources, versions and since when the device drifts. D1 keeps the desired documents and templates
 * as the durable record; a twin the hub has never held is seeded from it once. docs/twins.md.
 */
import {
  changedKeys, documentBytes, layerDocuments, patchDocument, twinDelta, TWIN_MAX_BYTES, jsonEqual,
  type DesiredPatchResult, type JsonObject, type TwinCounts, type TwinDeviceSeed, type TwinDrift, type TwinState,
  type TwinSyncChange, type TwinTemplateSet,
} from "../src/shared/twin";
import { ok, refuse, type Outcome } from "../src/shared/hub-contract";
import { iso } from "../src/shared/time";

export const TWINS_SCHEMA = `
CREATE TABLE IF NOT EXISTS twins (
  device_id TEXT PRIMARY KEY,
  segment TEXT NOT NULL,
  desired TEXT NOT NULL,
  desired_updated TEXT NOT NULL,
  version INTEGER NOT NULL,
  reported TEXT NOT NULL DEFAULT '{}',
  reported_updated TEXT NOT NULL DEFAULT '{}',
  reported_version INTEGER NOT NULL DEFAULT 0,
  last_reported_ms INTEGER,
  effective TEXT NOT NULL DEFAULT '{}',
  sources TEXT NOT NULL DEFAULT '{}',
  effective_version INTEGER NOT NULL DEFAULT 0,
  drift_since_ms INTEGER
);
CREATE TABLE IF NOT EXISTS twin_templates (name TEXT PRIMARY KEY, document TEXT NOT NULL);
`;

/** Meta key: the generation of the template set this hub holds (absent: not loaded from D1 yet). */
const TEMPLATES_GENERATION = "twin_templates_generation";

type TwinRow = {
  device_id: string; segment: string; desired: string; desired_updated: string; version: number;
  reported: string; reported_updated: string; reported_version: number; last_reported_ms: number | null;
  effective: string; sources: string; effective_version: number; drift_since_ms: number | null;
};

export interface TwinHost {
  siteId(): string;
  now(): number;
  d1(): D1Database;
  meta(key: string): string | undefined;
  setMeta(key: string, value: string): void;
  /** A twin changed: `device.twin` on the site's live channel. */
  emit(type: string, data: unknown): void;
  /** The device's effective desired state changed: tell it now if it is on its channel. */
  sendDelta(deviceId: string, message: { type: "twin.delta"; version: number; desired: JsonObject; delta: JsonObject }): void;
}

const parse = (text: string): JsonObject => JSON.parse(text) as JsonObject;

/** Per top-level key, when it last changed: keys gone are dropped, changed ones stamped now. */
function stampKeys(updated: Record<string, string>, document: JsonObject, changed: string[], now: number) {
  const next: Record<string, string> = {};
  for (const key of Object.keys(document)) next[key] = changed.includes(key) ? iso(now) : (updated[key] ?? iso(now));
  return next;
}

export class Twins {
  constructor(private readonly sql: SqlStorage, private readonly host: TwinHost) {}

  private row(deviceId: string): TwinRow | undefined {
    return this.sql.exec<TwinRow>("SELECT * FROM twins WHERE device_id = ?", deviceId).toArray()[0];
  }

  /** The device's twin, seeded from D1 the first time this hub holds it; undefined for a device not on this site. */
  async twin(deviceId: string): Promise<TwinState | undefined> {
    const row = await this.ensure(deviceId);
    return row && this.view(row);
  }

  /** Hub-local only (the heartbeat's hot path): the effective version, 0 for a twin this hub does not hold yet. */
  desiredVersion(deviceId: string): number {
    return this.sql.exec<{ v: number }>("SELECT effective_version AS v FROM twins WHERE device_id = ?", deviceId).toArray()[0]?.v ?? 0;
  }

  async ensure(deviceId: string): Promise<TwinRow | undefined> {
    const existing = this.row(deviceId);
    if (existing) return existing;
    await this.loadTemplates();
    const seed = await this.host.d1().prepare(
      "SELECT d.device_id, d.device_type, t.desired, t.version FROM devices d LEFT JOIN device_twins t ON t.device_id = d.device_id WHERE d.device_id = ? AND d.site_id = ?",
    ).bind(deviceId, this.host.siteId()).first<{ device_id: string; device_type: string; desired: string | null; version: number | null }>();
    if (!seed) return undefined;
    this.seed({ device_id: seed.device_id, device_type: seed.device_type, desired: seed.desired ? parse(seed.desired) : null, version: seed.version ?? 0 });
    this.recompute(deviceId, this.host.now());
    return this.row(deviceId);
  }

  private seed(device: TwinDeviceSeed) {
    const desired = device.desired ?? {};
    const stamped = JSON.stringify(stampKeys({}, desired, [], this.host.now()));
    this.sql.exec(
      "INSERT INTO twins (device_id, segment, desired, desired_updated, version) VALUES (?, ?, ?, ?, ?) ON CONFLICT(device_id) DO NOTHING",
      device.device_id, device.device_type, JSON.stringify(desired), stamped, device.version,
    );
  }

  /** The site's templates, read from D1 once per hub (later changes arrive through setTemplates). */
  private async loadTemplates() {
    if (this.host.meta(TEMPLATES_GENERATION) !== undefined) return;
    const { results } = await this.host.d1().prepare(
      "SELECT scope, segment, document, version FROM twin_templates WHERE (scope = 'site' AND scope_id = ?1) OR (scope = 'tenant' AND scope_id = (SELECT tenant_id FROM sites WHERE site_id = ?1))",
    ).bind(this.host.siteId()).all<{ scope: string; segment: string; document: string; version: number }>();
    const site = results.find((r) => r.scope === "site");
    this.replaceTemplates({
      generation: results.reduce((sum, r) => sum + r.version, 0),
      site: site ? parse(site.document) : null,
      segments: Object.fromEntries(results.filter((r) => r.scope === "tenant").map((r) => [r.segment, parse(r.document)])),
    });
  }

  private replaceTemplates(templates: TwinTemplateSet) {
    this.sql.exec("DELETE FROM twin_templates");
    if (templates.site) this.sql.exec("INSERT INTO twin_templates (name, document) VALUES ('site', ?)", JSON.stringify(templates.site));
    for (const [segment, document] of Object.entries(templates.segments)) {
      this.sql.exec("INSERT INTO twin_templates (name, document) VALUES (?, ?)", `segment:${segment}`, JSON.stringify(document));
    }
    this.host.setMeta(TEMPLATES_GENERATION, String(templates.generation));
  }

  private template(name: string): JsonObject | undefined {
    const row = this.sql.exec<{ document: string }>("SELECT document FROM twin_templates WHERE name = ?", name).toArray()[0];
    return row ? parse(row.document) : undefined;
  }

  /**
   * Recomputes the effective document, delta and drift of one twin. The effective version moves only
   * when the effective document changed, and then the device hears of it on its channel.
   */
  private recompute(deviceId: string, now: number): { inSyncChanged: boolean; effectiveChanged: boolean } {
    const row = this.row(deviceId);
    if (!row) return { inSyncChanged: false, effectiveChanged: false };
    const segment = this.template(`segment:${row.segment}`);
    const site = this.template("site");
    const { effective, sources } = layerDocuments([
      ...(segment ? [{ source: `segment:${row.segment}`, document: segment }] : []),
      ...(site ? [{ source: "site", document: site }] : []),
      { source: "device", document: parse(row.desired) },
    ]);
    const effectiveChanged = !jsonEqual(effective, parse(row.effective));
    const version = effectiveChanged ? row.effective_version + 1 : row.effective_version;
    const delta = twinDelta(effective, parse(row.reported));
    const inSync = Object.keys(delta).length === 0;
    const wasInSync = row.drift_since_ms === null;
    const driftSince = inSync ? null : (row.drift_since_ms ?? now);
    this.sql.exec(
      "UPDATE twins SET effective = ?, sources = ?, effective_version = ?, drift_since_ms = ? WHERE device_id = ?",
      JSON.stringify(effective), JSON.stringify(sources), version, driftSince, deviceId,
    );
    if (effectiveChanged) this.host.sendDelta(deviceId, { type: "twin.delta", version, desired: effective, delta });
    return { inSyncChanged: wasInSync !== inSync, effectiveChanged };
  }

  /**
   * An operator's merge patch of the device's own desired document, taken only when `ifMatch` is
   * the current version (412 otherwise). A patch that changes nothing keeps the version.
   */
  async patchDesired(deviceId: string, ifMatch: number, patch: JsonObject): Promise<Outcome<DesiredPatchResult> | undefined> {
    const row = await this.ensure(deviceId);
    if (!row) return undefined;
    if (row.version !== ifMatch) return refuse(412, `The twin's desired version is ${row.version}, not ${ifMatch}: read it again and retry with If-Match: "${row.version}"`);
    const before = parse(row.desired);
    const after = patchDocument(before, patch);
    if (documentBytes(after) > TWIN_MAX_BYTES) return refuse(413, `The desired document would be larger than ${TWIN_MAX_BYTES / 1024} KB`);
    const changed = changedKeys(before, after);
    if (changed.length) {
      const now = this.host.now();
      this.sql.exec(
        "UPDATE twins SET desired = ?, desired_updated = ?, version = version + 1 WHERE device_id = ?",
        JSON.stringify(after), JSON.stringify(stampKeys(JSON.parse(row.desired_updated) as Record<string, string>, after, changed, now)), deviceId,
      );
      this.recompute(deviceId, now);
      this.announce(deviceId);
    }
    return ok({ twin: this.view(this.row(deviceId)!), changed_keys: changed });
  }

  /** The device's merge patch of what it runs; answers the twin with the delta that remains. */
  async patchReported(deviceId: string, patch: JsonObject): Promise<Outcome<{ twin: TwinState; in_sync_changed: boolean }> | undefined> {
    const row = await this.ensure(deviceId);
    if (!row) return undefined;
    const before = parse(row.reported);
    const after = patchDocument(before, patch);
    if (documentBytes(after) > TWIN_MAX_BYTES) return refuse(413, `The reported document would be larger than ${TWIN_MAX_BYTES / 1024} KB`);
    const changed = changedKeys(before, after);
    const now = this.host.now();
    this.sql.exec(
      "UPDATE twins SET reported = ?, reported_updated = ?, reported_version = reported_version + ?, last_reported_ms = ? WHERE device_id = ?",
      JSON.stringify(after), JSON.stringify(stampKeys(JSON.parse(row.reported_updated) as Record<string, string>, after, changed, now)), changed.length ? 1 : 0, now, deviceId,
    );
    const { inSyncChanged } = this.recompute(deviceId, now);
    if (changed.length || inSyncChanged) this.announce(deviceId);
    return ok({ twin: this.view(this.row(deviceId)!), in_sync_changed: inSyncChanged });
  }

  /**
   * The site's templates changed: they replace the hub's copy, every device of the site (seeded from
   * `devices` where the hub did not hold it) is recomputed, and the ones whose in_sync flag moved
   * are answered so the Worker can record it in D1.
   */
  setTemplates(templates: TwinTemplateSet, devices: TwinDeviceSeed[]): TwinSyncChange[] {
    const held = this.host.meta(TEMPLATES_GENERATION);
    // An older set than the one held (two template writes whose calls crossed) changes nothing.
    if (held !== undefined && Number(held) > templates.generation) return [];
    this.replaceTemplates(templates);
    const now = this.host.now();
    const changes: TwinSyncChange[] = [];
    for (const device of devices) {
      this.seed(device);
      this.sql.exec("UPDATE twins SET segment = ? WHERE device_id = ?", device.device_type, device.device_id);
      const { inSyncChanged, effectiveChanged } = this.recompute(device.device_id, now);
      if (inSyncChanged) changes.push({ device_id: device.device_id, in_sync: this.row(device.device_id)!.drift_since_ms === null });
      if (effectiveChanged || inSyncChanged) this.announce(device.device_id);
    }
    return changes;
  }

  /** Devices not matching their effective desired state, longest drifting first. */
  drift(): TwinDrift[] {
    const now = this.host.now();
    return this.sql.exec<TwinRow>("SELECT * FROM twins WHERE drift_since_ms IS NOT NULL ORDER BY drift_since_ms, device_id").toArray().map((row) => {
      const delta = twinDelta(parse(row.effective), parse(row.reported));
      return {
        device_id: row.device_id, delta, delta_keys: Object.keys(delta).sort(),
        drift_since: iso(row.drift_since_ms!), drifting_for_s: Math.max(0, Math.floor((now - row.drift_since_ms!) / 1000)),
        last_reported_at: row.last_reported_ms === null ? null : iso(row.last_reported_ms), effective_version: row.effective_version,
      };
    });
  }

  /** How many of the given devices' twins are in sync and how many drift (twins not held yet count as neither). */
  counts(deviceIds: string[]): TwinCounts {
    const wanted = new Set(deviceIds);
    const rows = this.sql.exec<{ device_id: string; drifting: number }>("SELECT device_id, drift_since_ms IS NOT NULL AS drifting FROM twins").toArray()
      .filter((r) => wanted.has(r.device_id));
    const drifted = rows.filter((r) => r.drifting).length;
    return { in_sync: rows.length - drifted, drifted };
  }

  /** The device left this site (transferred or purged): its twin here goes; D1 keeps or drops the record. */
  forget(deviceId: string) {
    this.sql.exec("DELETE FROM twins WHERE device_id = ?", deviceId);
  }

  /** The device's type may have changed in D1: a twin held here follows it to its segment's template. */
  async refreshSegment(deviceId: string) {
    const row = this.row(deviceId);
    if (!row) return;
    const device = await this.host.d1().prepare("SELECT device_type FROM devices WHERE device_id = ?").bind(deviceId).first<{ device_type: string }>();
    if (!device || device.device_type === row.segment) return;
    this.sql.exec("UPDATE twins SET segment = ? WHERE device_id = ?", device.device_type, deviceId);
    const { effectiveChanged, inSyncChanged } = this.recompute(deviceId, this.host.now());
    if (effectiveChanged || inSyncChanged) this.announce(deviceId);
  }

  private announce(deviceId: string) {
    const twin = this.view(this.row(deviceId)!);
    this.host.emit("device.twin", {
      device_id: deviceId, version: twin.version, effective_version: twin.effective_version, reported_version: twin.reported_version,
      in_sync: twin.in_sync, delta_keys: Object.keys(twin.delta).sort(),
    });
  }

  view(row: TwinRow): TwinState {
    const effective = parse(row.effective);
    const reported = parse(row.reported);
    const delta = twinDelta(effective, reported);
    return {
      device_id: row.device_id, segment: row.segment,
      desired: parse(row.desired), reported, effective, sources: JSON.parse(row.sources) as Record<string, string>, delta,
      version: row.version, effective_version: row.effective_version, reported_version: row.reported_version,
      in_sync: Object.keys(delta).length === 0,
      last_reported_at: row.last_reported_ms === null ? null : iso(row.last_reported_ms),
      desired_updated_at: JSON.parse(row.desired_updated) as Record<string, string>,
      reported_updated_at: JSON.parse(row.reported_updated) as Record<string, string>,
      drift_since: row.drift_since_ms === null ? null : iso(row.drift_since_ms),
    };
  }
}
