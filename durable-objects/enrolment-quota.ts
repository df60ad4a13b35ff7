/**
 * How many devices a site may enrol with its bootstrap key per rolling hour. A bootstrap key is a
 * shared secret on every till of a store, so it leaks; the quota bounds what a leaked key can do
 * until an operator revokes it. Each enrolment takes a slot before it writes anything (the hub runs
 * one call at a time, so parallel enrolments cannot overshoot), and gives it back if it fails.
 */
import { ok, refuse, type Outcome } from "../src/shared/hub-contract";

export const ENROLMENT_QUOTA_SCHEMA = `
CREATE TABLE IF NOT EXISTS enrolment_slots (slot TEXT PRIMARY KEY, taken_at INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS enrolment_slots_taken ON enrolment_slots (taken_at);
`;

export const ENROLMENT_WINDOW_MS = 3_600_000;

export class EnrolmentQuota {
  constructor(private readonly sql: SqlStorage) {}

  /** A slot for one enrolment now, or a 429 saying when the oldest slot of the hour frees up. */
  take(perHour: number, now: number): Outcome<{ slot: string }> {
    this.sql.exec("DELETE FROM enrolment_slots WHERE taken_at <= ?", now - ENROLMENT_WINDOW_MS);
    const { n, oldest } = this.sql.exec<{ n: number; oldest: number | null }>("SELECT count(*) AS n, min(taken_at) AS oldest FROM enrolment_slots").one();
    if (n >= perHour) {
      const retryAfterS = Math.max(1, Math.ceil(((oldest ?? now) + ENROLMENT_WINDOW_MS - now) / 1000));
      return refuse(429, `This site's bootstrap enrolment quota is used up (${perHour} devices per hour); try again later`, retryAfterS);
    }
    const slot = crypto.randomUUID();
    this.sql.exec("INSERT INTO enrolment_slots (slot, taken_at) VALUES (?, ?)", slot, now);
    return ok({ slot });
  }

  /** The enrolment did not happen after all: its slot is free again. */
  give(slot: string) {
    this.sql.exec("DELETE FROM enrolment_slots WHERE slot = ?", slot);
  }
}
