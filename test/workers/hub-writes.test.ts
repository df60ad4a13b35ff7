import { describe, expect, it } from "vitest";
import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { SiteHub } from "../../durable-objects/site-hub";
import { db } from "./helpers";
import { heartbeat, registerDevice, siteWithOperator, telemetry } from "./device-helpers";
import { hub, hubSql, runAlarm } from "./commands-helpers";
import { installClock, type ManualClock } from "./clock";

/**
 * The hub's SQLite is billed per row written, and heartbeats and telemetry arrive every few seconds
 * from every device: steady traffic must write (almost) nothing, what matters must be written at once,
 * and what waits in memory must reach storage on the once-a-minute flush.
 */

/** A site with one device whose hub runs on a manual clock an hour ahead, so only the test runs its alarms. */
async function setup() {
  const { owner, siteId } = await siteWithOperator();
  const device = await registerDevice(owner.token, siteId);
  const clock = await installClock(siteId);
  clock.advance(3_600_000);
  return { siteId, device, clock };
}

/** Rows the hub's SQLite statements wrote while `work` ran. */
async function rowsWrittenBy(siteId: string, work: () => Promise<unknown>): Promise<number> {
  const cursors: { rowsWritten: number }[] = [];
  let restore = () => {};
  await runInDurableObject(hub(siteId), (_i, state) => {
    const sql = state.storage.sql;
    const exec = sql.exec.bind(sql);
    sql.exec = <T extends Record<string, SqlStorageValue>>(query: string, ...bindings: unknown[]) => {
      const cursor = exec<T>(query, ...bindings);
      cursors.push(cursor);
      return cursor;
    };
    restore = () => { sql.exec = exec; };
  });
  try {
    await work();
  } finally {
    await runInDurableObject(hub(siteId), () => restore());
  }
  return cursors.reduce((n, c) => n + c.rowsWritten, 0);
}

type StoredPresence = { status: string; last_seen_ms: number; boot_id: string | null };
const storedPresence = async (siteId: string, deviceId: string) =>
  (await hubSql<StoredPresence>(siteId, "SELECT status, last_seen_ms, boot_id FROM presence WHERE device_id = ?", deviceId))[0];

/** What a hub that was evicted and started again over the same storage would do (a new instance). */
async function withRestartedHub<T>(siteId: string, clock: ManualClock, work: (fresh: SiteHub) => Promise<T>): Promise<T> {
  return runInDurableObject(hub(siteId), (_i, state) => {
    const fresh = new SiteHub(state, env);
    fresh.clock = clock;
    return work(fresh);
  });
}

describe("presence in the hub's SQLite", () => {
  it("writes no row for steady heartbeats, and a status transition or a new boot at once", async () => {
    const { siteId, device, clock } = await setup();
    expect((await heartbeat(device.device_id, device.api_key, { boot_id: "boot-1" })).status).toBe(200);
    const first = await storedPresence(siteId, device.device_id);
    expect(first).toMatchObject({ status: "online", boot_id: "boot-1" });

    const steady = await rowsWrittenBy(siteId, async () => {
      for (let i = 0; i < 5; i++) {
        clock.advance(10_000);
        expect((await heartbeat(device.device_id, device.api_key, { boot_id: "boot-1" })).json.device_status).toBe("online");
      }
    });
    expect(steady).toBe(0);
    expect((await storedPresence(siteId, device.device_id)).last_seen_ms).toBe(first.last_seen_ms);

    clock.advance(10_000);
    await heartbeat(device.device_id, device.api_key, { boot_id: "boot-1", status: "error" });
    expect(await storedPresence(siteId, device.device_id)).toMatchObject({ status: "error", last_seen_ms: first.last_seen_ms + 60_000 });
    clock.advance(10_000);
    await heartbeat(device.device_id, device.api_key, { boot_id: "boot-2", status: "error" });
    expect(await storedPresence(siteId, device.device_id)).toMatchObject({ status: "error", boot_id: "boot-2" });
  });

  it("stores last_seen on the minute flush, so after an eviction it is at most a minute old and the offline sweep still acts", async () => {
    const { siteId, device, clock } = await setup();
    // Three minutes of heartbeats every 10 s, the hub's alarm running whenever hub time has moved on.
    let lastBeat = 0;
    for (let i = 0; i < 18; i++) {
      await heartbeat(device.device_id, device.api_key);
      lastBeat = clock.now();
      await runAlarm(siteId);
      clock.advance(10_000);
    }
    const stored = await storedPresence(siteId, device.device_id);
    expect(stored.status).toBe("online");
    expect(stored.last_seen_ms).toBeGreaterThan(lastBeat - 60_000);
    expect(stored.last_seen_ms).toBeLessThan(lastBeat);

    // The hub is evicted: a new instance knows only what was stored, which may be a flush old. Its
    // alarm 30 s after that stored last_seen does not call the device offline (it may well still be
    // calling in: the stored value is not the last word)...
    clock.advance(stored.last_seen_ms + 30_000 - clock.now());
    const statusOnRestartedHub = () => withRestartedHub(siteId, clock, async (fresh) => {
      await fresh.alarm();
      return (await fresh.siteHealth(siteId)).devices.find((d) => d.device_id === device.device_id)?.status;
    });
    expect(await statusOnRestartedHub()).toBe("online");
    // ...but once a flush and 3 missed intervals of 10 s have passed without a word, it does, in its storage and in D1.
    clock.advance(stored.last_seen_ms + 60_000 + 30_000 - clock.now());
    expect(await statusOnRestartedHub()).toBe("offline");
    expect((await storedPresence(siteId, device.device_id)).status).toBe("offline");
    const row = await db().select().from(schema.devices).where(eq(schema.devices.deviceId, device.device_id)).get();
    expect(row!.status).toBe("offline");
  });

  it("keeps a transition through an eviction that comes before any flush", async () => {
    const { siteId, device, clock } = await setup();
    await heartbeat(device.device_id, device.api_key);
    clock.advance(10_000);
    await heartbeat(device.device_id, device.api_key, { status: "error" });
    await withRestartedHub(siteId, clock, async (fresh) => {
      const health = await fresh.siteHealth(siteId);
      expect(health.devices.find((d) => d.device_id === device.device_id)?.status).toBe("error");
    });
  });
});

describe("metrics state in the hub's SQLite", () => {
  const sample = { cpu_usage: 30, memory_usage: 50, disk_usage: 40, network_latency_ms: 8, uptime_seconds: 100 };

  it("writes no row for a sample it does not keep; the latest sample reaches storage and D1 on the minute flush", async () => {
    const { siteId, device, clock } = await setup();
    expect((await telemetry(device.device_id, device.api_key, sample)).json).toMatchObject({ stored: true, reason: "first_sample" });
    await runAlarm(siteId);

    const quiet = await rowsWrittenBy(siteId, async () => {
      for (let i = 1; i <= 3; i++) {
        clock.advance(15_000);
        const res = await telemetry(device.device_id, device.api_key, { ...sample, cpu_usage: 30 + i * 3, uptime_seconds: 100 + i * 15 });
        expect(res.json).toMatchObject({ stored: false, reason: "unchanged" });
      }
    });
    expect(quiet).toBe(0);
    const latestStored = async () =>
      JSON.parse((await hubSql<{ latest: string }>(siteId, "SELECT latest FROM metrics_state WHERE device_id = ?", device.device_id))[0].latest);
    expect((await latestStored()).cpu_usage).toBe(30);

    clock.advance(15_000);
    await runAlarm(siteId);
    expect((await latestStored()).cpu_usage).toBe(39);
    const d1 = await db().select().from(schema.deviceMetrics).where(eq(schema.deviceMetrics.deviceId, device.device_id)).get();
    expect(d1!.cpuUsage).toBe(39);
    expect(await hub(siteId).storedSampleCount(siteId, device.device_id)).toBe(1);
  });

  it("costs one presence row and one metrics row per device on the minute flush, nothing staged for D1", async () => {
    const { owner, siteId } = await siteWithOperator();
    const devices = [await registerDevice(owner.token, siteId), await registerDevice(owner.token, siteId), await registerDevice(owner.token, siteId)];
    const clock = await installClock(siteId);
    clock.advance(3_600_000);
    // A long interval, so the minute skipped here does not also take the devices offline.
    for (const d of devices) await heartbeat(d.device_id, d.api_key, { heartbeat_interval_s: 300 });
    for (const d of devices) await telemetry(d.device_id, d.api_key, sample);
    await runAlarm(siteId);
    for (const d of devices) {
      clock.advance(5_000);
      await heartbeat(d.device_id, d.api_key, { heartbeat_interval_s: 300 });
      await telemetry(d.device_id, d.api_key, { ...sample, uptime_seconds: 115 });
    }
    clock.advance(60_000);
    const written = await rowsWrittenBy(siteId, () => runAlarm(siteId));
    // 3 presence rows, 3 metrics rows, and the hub's own note of when it last flushed.
    expect(written).toBe(7);
    const sent = await db().select().from(schema.deviceMetrics).where(eq(schema.deviceMetrics.deviceId, devices[2].device_id)).get();
    expect(sent!.uptimeSeconds).toBe(115);
  });
});

