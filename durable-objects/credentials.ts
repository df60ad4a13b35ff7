/**
 * Device credentials as the site's hub knows them: the bcrypt hash and lifecycle state from D1, and
 * the SHA-256 digest of the key that last passed bcrypt against that hash. The hub is the one place
 * per site every device call passes through, so rotation and suspension invalidate here at once for
 * every isolate, and a device call needs no D1 read: the record is re-read from D1 at most once a
 * minute per device (a safety net should an invalidation ever be missed). The same read brings the
 * device's configured heartbeat interval, which presence uses.
 */
import { sameDigest } from "../src/shared/ids";
import type { Admission } from "../src/shared/hub-contract";

export const CREDENTIAL_REFRESH_MS = 60_000;

interface CredentialRecord {
  bcryptHash: string | null;
  state: string;
  siteId: string;
  intervalS: number;
  fetchedAt: number;
  verifiedDigest?: string;
}

export class DeviceCredentials {
  private readonly records = new Map<string, CredentialRecord>();

  constructor(private readonly d1: () => D1Database, private readonly siteId: () => string) {}

  async admit(deviceId: string, keyDigest: string, now: number): Promise<Admission> {
    const record = await this.current(deviceId, now);
    if (!record?.bcryptHash || record.siteId !== this.siteId()) return { result: "unknown" };
    if (!record.verifiedDigest || !sameDigest(record.verifiedDigest, keyDigest)) return { result: "verify", bcryptHash: record.bcryptHash };
    return record.state === "active" ? { result: "ok" } : { result: "inactive", state: record.state };
  }

  /** The Worker verified `keyDigest` against `bcryptHash`; remembered only if that is still the hash. */
  async confirm(deviceId: string, keyDigest: string, bcryptHash: string, now: number): Promise<Admission> {
    const record = await this.current(deviceId, now);
    if (!record?.bcryptHash || record.bcryptHash !== bcryptHash || record.siteId !== this.siteId()) return { result: "unknown" };
    record.verifiedDigest = keyDigest;
    return record.state === "active" ? { result: "ok" } : { result: "inactive", state: record.state };
  }

  /** The hash the device's key was last verified against, when `keyDigest` is that key (for a channel socket). */
  verifiedHash(deviceId: string, keyDigest: string): string | undefined {
    const record = this.records.get(deviceId);
    return record?.bcryptHash && record.verifiedDigest && sameDigest(record.verifiedDigest, keyDigest) ? record.bcryptHash : undefined;
  }

  invalidate(deviceId: string) {
    this.records.delete(deviceId);
  }

  /** The operator's heartbeat interval for the device, as last read (presence falls back to its default). */
  configuredIntervalS(deviceId: string): number | undefined {
    return this.records.get(deviceId)?.intervalS;
  }

  /**
   * Reads the device's record now (after an operator changed it), for its configured interval. The
   * verified key survives when the hash did not change (a lifecycle or settings change), so a device
   * holding an open channel is not sent back to bcrypt by an unrelated edit.
   */
  async refresh(deviceId: string, now: number): Promise<number | undefined> {
    const cached = this.records.get(deviceId);
    if (cached) cached.fetchedAt = Number.NEGATIVE_INFINITY;
    return (await this.current(deviceId, now))?.intervalS;
  }

  private async current(deviceId: string, now: number): Promise<CredentialRecord | undefined> {
    const cached = this.records.get(deviceId);
    if (cached && now - cached.fetchedAt < CREDENTIAL_REFRESH_MS) return cached;
    const row = await this.d1()
      .prepare("SELECT api_key_hash, lifecycle_state, site_id, heartbeat_interval_s FROM devices WHERE device_id = ?")
      .bind(deviceId)
      .first<{ api_key_hash: string | null; lifecycle_state: string; site_id: string; heartbeat_interval_s: number }>();
    if (!row) {
      this.records.delete(deviceId);
      return undefined;
    }
    const record: CredentialRecord = {
      bcryptHash: row.api_key_hash, state: row.lifecycle_state, siteId: row.site_id, intervalS: row.heartbeat_interval_s, fetchedAt: now,
    };
    // A refresh that finds the same hash keeps the verified key: nothing about it changed.
    if (cached && cached.bcryptHash === record.bcryptHash) record.verifiedDigest = cached.verifiedDigest;
    this.records.set(deviceId, record);
    return record;
  }
}
