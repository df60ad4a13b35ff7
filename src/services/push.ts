import { and, eq, sql } from "drizzle-orm";
import type { AuthUser, Db, Env } from "../env";
import { auditLogs, devices, pushDeliveries } from "../db/schema";
import { auditRow } from "../shared/audit-row";
import { isUniqueViolation, notFound, unprocessable } from "../lib/errors";
import { currentDate } from "../lib/clock";
import { canonicalJson, sha256Hex } from "../shared/ids";
import type { CommandRecord, QueueInput } from "../shared/hub-contract";
import { COMMAND_RETENTION_MS, DEFAULT_COMMAND_TTL_S } from "../shared/vocabulary";
import { siteHub } from "../hub/client";
import { authorizeSite, currentSiteRoles, deviceNotFound } from "./access";
import type { DeviceRow } from "./devices";
import type { PushPlatformId } from "./push-platforms";
import { vendorSetup, type VendorPlatformId } from "./vendor-push";

/** At most this many devices per request, whether one send or a bulk of them. */
export const MAX_PUSH_TARGETS = 1_000;

export const PUSH_PRIORITIES = ["low", "normal", "high"] as const;
export type PushPriority = (typeof PUSH_PRIORITIES)[number];

export interface PushNotification {
  device_id?: string;
  device_ids?: string[];
  site_id?: string;
  title: string;
  body?: string;
  data?: Record<string, unknown>;
  priority: PushPriority;
  ttl_seconds?: number;
  platform?: PushPlatformId;
}

export type TargetStatus = "delivered" | "queued" | "failed";
export type TargetChannel = "device_channel" | "command_poll" | "simulated_agent" | VendorPlatformId;

export interface TargetResult {
  device_id: string;
  site_id: string;
  /** Index of the notification in the request (always 0 for a single send). */
  notification: number;
  status: TargetStatus;
  channel: TargetChannel | null;
  command_id: string | null;
  command_status: CommandRecord["status"] | null;
  reason: string | null;
}

export type PushRow = typeof pushDeliveries.$inferSelect;

export const pushNotFound = (pushId: string) => notFound(`Push with ID '${pushId}' not found`);

interface Target { device: DeviceRow; notification: number }

// ---- who the push goes to, and whether the caller may send it ----------------------------------

async function devicesById(db: Db, ids: string[]): Promise<Map<string, DeviceRow>> {
  // One JSON parameter for the whole list: D1 binds at most 100 per statement.
  const rows = await db.select().from(devices)
    .where(sql`${devices.deviceId} IN (SELECT value FROM json_each(${JSON.stringify(ids)}))`).all();
  return new Map(rows.map((d) => [d.deviceId, d]));
}

/**
 * Resolves every notification's targets and checks the operator role on each target's site, all
 * before anything is queued: one refused target refuses the whole request, with the answer the
 * access layer gives for that object (an unknown device, or one on a site the caller has no role
 * on, is 404; a role below operator is 403).
 */
async function resolveTargets(db: Db, user: AuthUser, notifications: PushNotification[], request?: Request): Promise<Target[]> {
  const namedCount = notifications.reduce((sum, n) => sum + (n.site_id ? 0 : new Set(n.device_ids ?? [n.device_id]).size), 0);
  if (namedCount > MAX_PUSH_TARGETS) throw tooManyTargets();
  const namedIds = [...new Set(notifications.flatMap((n) => n.device_ids ?? (n.device_id ? [n.device_id] : [])))];
  const named = namedIds.length ? await devicesById(db, namedIds) : new Map<string, DeviceRow>();
  const checkedSites = new Set<string>();
  const targets: Target[] = [];
  for (const [index, n] of notifications.entries()) {
    if (n.site_id) {
      if (!checkedSites.has(n.site_id)) await authorizeSite(db, user, n.site_id, "operator", request);
      checkedSites.add(n.site_id);
      const siteDevices = await db.select().from(devices)
        .where(and(eq(devices.siteId, n.site_id), eq(devices.lifecycleState, "active"))).all();
      targets.push(...siteDevices.map((device) => ({ device, notification: index })));
      if (targets.length > MAX_PUSH_TARGETS) throw tooManyTargets();
      continue;
    }
    for (const id of new Set(n.device_ids ?? [n.device_id!])) {
      const device = named.get(id);
      if (!device) throw deviceNotFound(id);
      if (!checkedSites.has(device.siteId)) {
        await authorizeSite(db, user, device.siteId, "operator", request, { hiddenAs: () => deviceNotFound(id) });
        checkedSites.add(device.siteId);
      }
      targets.push({ device, notification: index });
    }
    if (targets.length > MAX_PUSH_TARGETS) throw tooManyTargets();
  }
  return targets;
}

const tooManyTargets = () =>
  unprocessable([{ loc: ["body"], msg: `At most ${MAX_PUSH_TARGETS} target devices per request; this one names more`, type: "too_many_targets" }]);

// ---- how a target's command stands ---------------------------------------------------------------

/**
 * How a command just queued for a push went out, from the hub's reply: sent on the device's open
 * channel socket (`delivered` at once), waiting for a real device's poll (`queued`), or taken at
 * once by a simulated agent.
 */
function initialDelivery(queued: { command: CommandRecord; created: boolean; delivered_on_channel: boolean }, simulated: boolean): Pick<TargetResult, "status" | "channel"> {
  if (queued.delivered_on_channel) return { status: "delivered", channel: "device_channel" };
  const channel: TargetChannel = simulated ? "simulated_agent" : "command_poll";
  return { status: statusOfCommand(queued.command).status, channel };
}

/** A push target's status read from the command carrying it. */
function statusOfCommand(command: CommandRecord): Pick<TargetResult, "status" | "reason"> {
  switch (command.status) {
    case "pending":
      return { status: "queued", reason: null };
    case "delivered":
    case "acknowledged":
    case "completed":
      return { status: "delivered", reason: null };
    case "failed":
      return { status: "failed", reason: command.error_message ?? "The device reported that the notification failed" };
    case "expired":
      return { status: "failed", reason: command.error_message ?? "Expired before the device took it" };
    case "cancelled":
      return { status: "failed", reason: command.error_message ?? "Cancelled before the device took it" };
  }
}

// ---- sending ----------------------------------------------------------------------------------------

const notifyPayload = (n: PushNotification) => ({
  title: n.title,
  ...(n.body !== undefined ? { body: n.body } : {}),
  ...(n.data !== undefined ? { data: n.data } : {}),
  priority: n.priority,
});

/** The Idempotency-Key each command of a repeated push is queued with, so a retry queues nothing twice. */
const commandKey = (user: AuthUser, key: string, notification: number) => `push:${user.id}:${notification}:${key}`;

const vendorOf = (n: PushNotification): VendorPlatformId | undefined => (n.platform === "fcm" || n.platform === "apns" ? n.platform : undefined);

async function fanOut(env: Env, db: Db, user: AuthUser, notifications: PushNotification[], targets: Target[], idempotencyKey: string | undefined): Promise<TargetResult[]> {
  const results = new Map<Target, TargetResult>();
  const viaVendor = targets.filter((t) => vendorOf(notifications[t.notification]!));
  const viaQueue = targets.filter((t) => !vendorOf(notifications[t.notification]!));
  await Promise.all([
    queueFanOut(env, user, notifications, viaQueue, idempotencyKey, results),
    vendorFanOut(env, db, notifications, viaVendor, results),
  ]);
  return targets.map((t) => results.get(t)!);
}

/** Through each device's command queue: one hub call per site. */
async function queueFanOut(
  env: Env, user: AuthUser, notifications: PushNotification[], targets: Target[], idempotencyKey: string | undefined, results: Map<Target, TargetResult>,
) {
  const bySite = new Map<string, Target[]>();
  for (const t of targets) bySite.set(t.device.siteId, [...(bySite.get(t.device.siteId) ?? []), t]);
  await Promise.all([...bySite].map(async ([siteId, siteTargets]) => {
    const active = siteTargets.filter((t) => t.device.lifecycleState === "active");
    for (const t of siteTargets) {
      if (t.device.lifecycleState !== "active") {
        results.set(t, failedTarget(t, `Device ${t.device.deviceId} is ${t.device.lifecycleState}; it cannot receive notifications`));
      }
    }
    if (!active.length) return;
    const inputs: QueueInput[] = active.map((t) => {
      const n = notifications[t.notification]!;
      return {
        deviceId: t.device.deviceId, commandType: "notify", payload: notifyPayload(n), ttlSeconds: n.ttl_seconds ?? DEFAULT_COMMAND_TTL_S,
        createdBy: user.email, userId: user.id, simulated: t.device.deviceSource === "simulated", reason: "push",
        idempotencyKey: idempotencyKey ? commandKey(user, idempotencyKey, t.notification) : null,
      };
    });
    const outcomes = await siteHub(env, siteId).queueCommandBatch(inputs);
    active.forEach((t, i) => {
      const outcome = outcomes[i]!;
      if (!outcome.ok) {
        results.set(t, failedTarget(t, outcome.error.detail));
        return;
      }
      const { command } = outcome.value;
      results.set(t, {
        device_id: t.device.deviceId, site_id: siteId, notification: t.notification, command_id: command.command_id,
        command_status: command.status, reason: statusOfCommand(command).reason,
        ...initialDelivery(outcome.value, t.device.deviceSource === "simulated"),
      });
    });
  }));
}

const VENDOR_SENDS_IN_PARALLEL = 10;

/**
 * Through FCM or APNs, to the token the device registered in its DNA. The vendor accepting a
 * message is not delivery (neither reports that back), so an accepted target stays `queued`. A
 * token the vendor says is gone is removed from the device, so later sends fail at once.
 */
async function vendorFanOut(env: Env, db: Db, notifications: PushNotification[], targets: Target[], results: Map<Target, TargetResult>) {
  const sendable: Target[] = [];
  for (const t of targets) {
    const platform = vendorOf(notifications[t.notification]!)!;
    if (t.device.lifecycleState !== "active") {
      results.set(t, failedTarget(t, `Device ${t.device.deviceId} is ${t.device.lifecycleState}; it cannot receive notifications`));
    } else if (!t.device.pushToken || t.device.pushPlatform !== platform) {
      results.set(t, failedTarget(t, `Device ${t.device.deviceId} has registered no ${platform} token (device_token in its DNA)`));
    } else {
      sendable.push(t);
    }
  }
  for (let i = 0; i < sendable.length; i += VENDOR_SENDS_IN_PARALLEL) {
    await Promise.all(sendable.slice(i, i + VENDOR_SENDS_IN_PARALLEL).map(async (t) => {
      const n = notifications[t.notification]!;
      const platform = vendorOf(n)!;
      const setup = vendorSetup(env, platform);
      if (!setup.ok) {
        results.set(t, failedTarget(t, setup.reason));
        return;
      }
      const outcome = await setup.platform.send(t.device.pushToken!, {
        title: n.title, body: n.body, data: n.data, priority: n.priority, ttlSeconds: n.ttl_seconds ?? DEFAULT_COMMAND_TTL_S,
      });
      if (outcome.tokenGone) {
        await db.update(devices).set({ pushToken: null, pushPlatform: null })
          .where(and(eq(devices.deviceId, t.device.deviceId), eq(devices.pushToken, t.device.pushToken!)));
      }
      results.set(t, outcome.accepted
        ? { device_id: t.device.deviceId, site_id: t.device.siteId, notification: t.notification, status: "queued", channel: platform, command_id: null, command_status: null, reason: null }
        : { ...failedTarget(t, `${outcome.reason}${outcome.tokenGone ? "; the device's token was removed" : ""}`), channel: platform });
    }));
  }
}

const failedTarget = (t: Target, reason: string): TargetResult => ({
  device_id: t.device.deviceId, site_id: t.device.siteId, notification: t.notification, status: "failed", channel: null,
  command_id: null, command_status: null, reason,
});

/** The push an Idempotency-Key of this user already created, if any; the same key with another request is 422. */
async function pushOfIdempotencyKey(db: Db, user: AuthUser, key: string, fingerprint: string): Promise<PushRow | undefined> {
  const existing = await db.select().from(pushDeliveries)
    .where(and(eq(pushDeliveries.createdByUserId, user.id), eq(pushDeliveries.idempotencyKey, key))).get();
  if (existing && existing.requestFingerprint !== fingerprint) {
    throw unprocessable([{ loc: ["header", "idempotency-key"], msg: "This Idempotency-Key was already used with a different push", type: "idempotency_mismatch" }]);
  }
  return existing;
}

/**
 * Sends one or more notifications: checks every target first, queues a `notify` command per target
 * device through its site's hub (one call per site), and records the push with each target's
 * result. A device the hub refuses (at its open-commands cap, say) is a `failed` target with the
 * hub's reason; the others still go out. With an Idempotency-Key this user already sent with the
 * same request, nothing is queued again and the recorded push is answered (`created: false`).
 */
export async function sendPush(
  env: Env, db: Db, user: AuthUser, kind: PushRow["kind"], notifications: PushNotification[], idempotencyKey: string | undefined, request?: Request,
): Promise<{ push: PushRow; created: boolean }> {
  // Access first, on a repeat too: a caller who lost a role is refused as on a first attempt.
  const targets = await resolveTargets(db, user, notifications, request);
  const fingerprint = idempotencyKey ? await sha256Hex(canonicalJson({ kind, notifications })) : null;
  if (idempotencyKey && fingerprint) {
    const existing = await pushOfIdempotencyKey(db, user, idempotencyKey, fingerprint);
    if (existing) return { push: existing, created: false };
  }
  const results = await fanOut(env, db, user, notifications, targets, idempotencyKey);
  const row = {
    pushId: crypto.randomUUID(), kind, createdByUserId: user.id, createdBy: user.email,
    siteIds: [...new Set(targets.map((t) => t.device.siteId).concat(notifications.flatMap((n) => (n.site_id ? [n.site_id] : []))))].sort(),
    notifications, targets: results, idempotencyKey: idempotencyKey ?? null, requestFingerprint: fingerprint,
    createdAt: currentDate().toISOString(),
  };
  try {
    const [[push]] = await db.batch([db.insert(pushDeliveries).values(row).returning(), ...pushAudit(db, user, row.pushId, results, request)]);
    return { push: push!, created: true };
  } catch (error) {
    // A concurrent send with the same key won the unique index; its commands are the ones just
    // answered (same command keys), so answer as a repeat.
    if (idempotencyKey && fingerprint && isUniqueViolation(error, "push_deliveries.idempotency_key")) {
      const existing = await pushOfIdempotencyKey(db, user, idempotencyKey, fingerprint);
      if (existing) return { push: existing, created: false };
    }
    throw error;
  }
}

/** One push_sent audit row per site reached, with what became of its targets. */
function pushAudit(db: Db, user: AuthUser, pushId: string, results: TargetResult[], request?: Request) {
  const bySite = new Map<string, TargetResult[]>();
  for (const r of results) bySite.set(r.site_id, [...(bySite.get(r.site_id) ?? []), r]);
  return [...bySite].map(([siteId, siteResults]) => {
    const counts = countStatuses(siteResults);
    const channels = [...new Set(siteResults.flatMap((r) => (r.channel ? [r.channel] : [])))];
    return db.insert(auditLogs).values(auditRow({
      eventType: "push_sent",
      description: `Push ${pushId} to ${siteResults.length} device(s) of site ${siteId}: ${counts.delivered} delivered, ${counts.queued} queued, ${counts.failed} failed`,
      userId: user.id, siteId, metadata: { push_id: pushId, counts, channels }, request,
    }));
  });
}

// ---- reading ----------------------------------------------------------------------------------------

/**
 * A push the caller may read: anyone with a role on every site it reached (administrators: all),
 * its sender included only while they keep one. Anyone else is told it does not exist.
 */
export async function findReadablePush(db: Db, user: AuthUser, pushId: string): Promise<PushRow> {
  const push = await db.select().from(pushDeliveries).where(eq(pushDeliveries.pushId, pushId)).get();
  if (!push) throw pushNotFound(pushId);
  const roles = await currentSiteRoles(db, user.id, push.siteIds);
  if (push.siteIds.length === 0 || [...roles.values()].some((role) => !role)) throw pushNotFound(pushId);
  return push;
}

/** Each target's status now, from the command carrying it (as recorded once its hub no longer holds it). */
export async function currentTargets(env: Env, push: PushRow): Promise<TargetResult[]> {
  const recorded = push.targets as TargetResult[];
  const idsBySite = new Map<string, string[]>();
  for (const t of recorded) {
    if (t.command_id) idsBySite.set(t.site_id, [...(idsBySite.get(t.site_id) ?? []), t.command_id]);
  }
  const commands = new Map<string, CommandRecord>();
  await Promise.all([...idsBySite].map(async ([siteId, ids]) => {
    for (const command of await siteHub(env, siteId).getCommandBatch(ids)) commands.set(command.command_id, command);
  }));
  return recorded.map((t) => {
    const command = t.command_id ? commands.get(t.command_id) : undefined;
    if (!command) return t;
    return { ...t, ...statusOfCommand(command), command_status: command.status };
  });
}

export function countStatuses(targets: TargetResult[]) {
  const counts = { delivered: 0, queued: 0, failed: 0 };
  for (const t of targets) counts[t.status]++;
  return counts;
}

/** Push records older than the commands they point to are dropped, a bounded batch per run. */
export async function prunePushRecords(db: Db, now: Date) {
  const cutoff = new Date(now.getTime() - COMMAND_RETENTION_MS).toISOString();
  await db.delete(pushDeliveries).where(sql`${pushDeliveries.pushId} IN (
    SELECT push_id FROM push_deliveries WHERE created_at < ${cutoff} ORDER BY created_at LIMIT ${PRUNE_BATCH})`);
}

const PRUNE_BATCH = 1_000;
