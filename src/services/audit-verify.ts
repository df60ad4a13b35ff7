import { and, asc, eq, gt, isNull } from "drizzle-orm";
import type { Db } from "../env";
import { auditLogs } from "../db/schema";
import { canonicalAuditEvent, chainHash, type ChainBreak } from "../shared/audit-chain";
import { chainedFieldsOf } from "../shared/audit-view";

/** One verification walks at most this many rows; the reply says where to continue. */
export const VERIFY_MAX_ROWS = 20_000;
const PAGE = 500;

export interface ChainVerification {
  site_id: string | null;
  ok: boolean;
  checked: number;
  sealed: number;
  /** Rows at the chain's end not sealed yet (sealing follows insertion within seconds). */
  unsealed: number;
  first_unsealed_id: number | null;
  broken_at: { id: number; reason: ChainBreak } | null;
  /**
   * The first row walked and the prev_hash it was taken on trust from: the genesis hash when the walk
   * covers the chain from its start; otherwise the rows before it were pruned (retention) or checked
   * by an earlier walk (`after_id`). Anything removed before the anchor cannot be detected here;
   * compare with an earlier export or verification.
   */
  anchor: { id: number; prev_hash: string } | null;
  /** Where to continue (`after_id`) when the walk stopped at VERIFY_MAX_ROWS; null when it reached the end. */
  next_after_id: number | null;
}

/**
 * Walks one chain (a site's, or the service-wide chain when `siteId` is null) in id order and
 * reports its first broken link. The first row walked is the anchor: its prev_hash is taken on
 * trust (see `anchor`); every later row must point at the hash of the row before it.
 */
export async function verifyChain(db: Db, siteId: string | null, afterId = 0): Promise<ChainVerification> {
  const inChain = siteId === null ? isNull(auditLogs.siteId) : eq(auditLogs.siteId, siteId);
  const result: ChainVerification = {
    site_id: siteId, ok: true, checked: 0, sealed: 0, unsealed: 0, first_unsealed_id: null, broken_at: null, anchor: null, next_after_id: null,
  };
  let previousHash: string | undefined;
  let after = afterId;
  while (result.checked < VERIFY_MAX_ROWS) {
    const rows = await db.select().from(auditLogs).where(and(inChain, gt(auditLogs.id, after))).orderBy(asc(auditLogs.id)).limit(PAGE).all();
    for (const row of rows) {
      result.checked++;
      if (row.hash === null || row.prevHash === null) {
        result.unsealed++;
        result.first_unsealed_id ??= row.id;
        continue;
      }
      const broken = (reason: ChainBreak, id = row.id) => ({ ...result, ok: false, broken_at: { id, reason } });
      // A sealed row after an unsealed one: the unsealed one's seal was removed.
      if (result.first_unsealed_id !== null) return broken("seal_missing", result.first_unsealed_id);
      if (previousHash === undefined) {
        result.anchor = { id: row.id, prev_hash: row.prevHash };
      } else if (row.prevHash !== previousHash) {
        return broken("prev_hash_mismatch");
      }
      if (row.hash !== (await chainHash(row.prevHash, canonicalAuditEvent(chainedFieldsOf(row))))) return broken("hash_mismatch");
      result.sealed++;
      previousHash = row.hash;
    }
    if (rows.length < PAGE) return result;
    after = rows[rows.length - 1].id;
  }
  return { ...result, next_after_id: after };
}
