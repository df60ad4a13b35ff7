/** The caller's sites seen from the device registry: each with its device counts, or one with its devices. */
import { asc, desc, eq, sql } from "drizzle-orm";
import type { AuthUser, Db } from "../env";
import { devices, sites } from "../db/schema";
import { LIVE_STATUSES } from "../shared/vocabulary";
import { LIFECYCLE_STATES } from "../shared/device-lifecycle";
import { accessibleSiteIds } from "./access";

type SiteRow = typeof sites.$inferSelect;
type Counts = { siteId: string; status: string; lifecycleState: string; n: number }[];

function countsOf(rows: Counts) {
  const byStatus: Record<string, number> = Object.fromEntries(LIVE_STATUSES.map((s) => [s, 0]));
  const byLifecycle: Record<string, number> = Object.fromEntries(LIFECYCLE_STATES.map((s) => [s, 0]));
  let total = 0;
  for (const r of rows) {
    byStatus[r.status] = (byStatus[r.status] ?? 0) + r.n;
    byLifecycle[r.lifecycleState] = (byLifecycle[r.lifecycleState] ?? 0) + r.n;
    total += r.n;
  }
  return { total_devices: total, by_status: byStatus, by_lifecycle_state: byLifecycle };
}

export const toSiteHeader = (s: SiteRow) => ({
  site_id: s.siteId, name: s.name, description: s.description, location: s.location, is_active: s.isActive,
  created_at: s.createdAt, updated_at: s.updatedAt,
});

/** Every site the caller can read (administrators: all), oldest first, each with its devices counted by status and lifecycle state. */
export async function siteDeviceSummaries(db: Db, user: AuthUser, page: { limit: number; offset: number }) {
  const visible = await accessibleSiteIds(db, user);
  if (visible && visible.length === 0) return { rows: [], total: 0 };
  // One parameter however many sites a user has (json_each).
  const inVisible = visible ? sql`${sites.siteId} IN (SELECT value FROM json_each(${JSON.stringify(visible)}))` : undefined;
  const [rows, [{ total }]] = await Promise.all([
    db.select().from(sites).where(inVisible).orderBy(asc(sites.createdAt), asc(sites.id)).limit(page.limit).offset(page.offset).all(),
    db.select({ total: sql<number>`count(*)` }).from(sites).where(inVisible).all(),
  ]);
  if (!rows.length) return { rows: [], total };
  const counts = await db.select({ siteId: devices.siteId, status: devices.status, lifecycleState: devices.lifecycleState, n: sql<number>`count(*)` })
    .from(devices).where(sql`${devices.siteId} IN (SELECT value FROM json_each(${JSON.stringify(rows.map((r) => r.siteId))}))`)
    .groupBy(devices.siteId, devices.status, devices.lifecycleState).all();
  return { rows: rows.map((s) => ({ ...toSiteHeader(s), ...countsOf(counts.filter((c) => c.siteId === s.siteId)) })), total };
}

/** One site with its counts and its devices, newest first. */
export async function siteWithDevices(db: Db, site: SiteRow) {
  const list = await db.select().from(devices).where(eq(devices.siteId, site.siteId)).orderBy(desc(devices.createdAt), desc(devices.id)).all();
  const counts = countsOf(list.map((d) => ({ siteId: d.siteId, status: d.status, lifecycleState: d.lifecycleState, n: 1 })));
  return { site: { ...toSiteHeader(site), ...counts }, devices: list };
}
