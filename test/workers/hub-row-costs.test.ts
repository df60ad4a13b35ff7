// Rows written in a hub's SQLite are billed one by one, and presence is written on every device
// call: these tests count what the hot path writes, through the cursor counts the runtime bills by.
import { describe, expect, it } from "vitest";
import { runInDurableObject } from "cloudflare:test";
import { Presence } from "../../durable-objects/presence";
import { MetricsStore, migrateMetricsHistory } from "../../durable-objects/metrics";
import { LiveRing, migrateLiveEvents } from "../../durable-objects/live";
import { hub } from "./commands-helpers";
import { unique } from "./helpers";

/** `sql` with every statement's billed writes added up (read once each cursor is done). */
function countingWrites(sql: SqlStorage) {
  const cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
  const counted = new Proxy(sql, {
    get(target, property) {
      if (property !== "exec") return Reflect.get(target, property, target);
      return (query: string, ...bindings: unknown[]) => {
        const cursor = target.exec(query, ...bindings);
        cursors.push(cursor);
        return cursor;
      };
    },
  });
  const written = () => cursors.reduce((sum, cursor) => sum + cursor.rowsWritten, 0);
  return { sql: counted, written, reset: () => cursors.splice(0) };
}

describe("a hub's presence writes", () => {
  it("cost one row for a device heard from again in the same state, and the status index only on a change", async () => {
    const siteId = unique("ROWS").toUpperCase();
    await runInDurableObject(hub(siteId), async (_instance, state) => {
      const counting = countingWrites(state.storage.sql);
      const presence = new Presence(counting.sql);
      const deviceId = unique("probe");
      const now = Date.now();

      expect(presence.sighted({ deviceId }, now).transition?.next).toBe("online");
      counting.reset();
      expect(presence.sighted({ deviceId, uptimeS: 10 }, now + 10_000).transition).toBeUndefined();
      expect(counting.written()).toBe(1);
      expect(presence.get(deviceId)).toMatchObject({ status: "online", last_seen_ms: now + 10_000, uptime_s: 10 });

      counting.reset();
      expect(presence.sighted({ deviceId, reportedStatus: "error" }, now + 20_000).transition?.next).toBe("error");
      expect(counting.written()).toBe(2);
      expect(presence.get(deviceId)?.status).toBe("error");
    });
  });
});

const policy = { snapshotIntervalMs: 300_000, changeThreshold: 0.05, zeroBaselineDelta: 1, errorRateDelta: 0.01, retentionDays: 90 };
const sample = (cpu: number) => ({ cpu_usage: cpu, memory_usage: 40, disk_usage: 50, network_latency_ms: 5 });

describe("a hub's metrics history and live ring", () => {
  it("write one row per stored sample, one per unchanged sample's latest value, and one per live event", async () => {
    await runInDurableObject(hub(unique("ROWS").toUpperCase()), async (_instance, state) => {
      const counting = countingWrites(state.storage.sql);
      const metrics = new MetricsStore(counting.sql, policy);
      const ring = new LiveRing(counting.sql, () => "SITE");
      const deviceId = unique("probe");
      const now = Date.now();

      metrics.ingest(deviceId, sample(20), now);
      counting.reset();
      expect(metrics.ingest(deviceId, sample(40), now + 15_000)).toEqual({ stored: true, reason: "changed" });
      // The history row and the device's delta state.
      expect(counting.written()).toBe(2);
      counting.reset();
      expect(metrics.ingest(deviceId, sample(40), now + 30_000)).toEqual({ stored: false, reason: "unchanged" });
      expect(counting.written()).toBe(1);

      counting.reset();
      const first = ring.append("device.metrics", { device_id: deviceId }, now);
      expect(counting.written()).toBe(1);
      expect(ring.append("device.metrics", { device_id: deviceId }, now).seq).toBe(first.seq + 1);
    });
  });

  it("keep apart samples of one device stored in the same millisecond, in order", async () => {
    await runInDurableObject(hub(unique("ROWS").toUpperCase()), async (_instance, state) => {
      const metrics = new MetricsStore(state.storage.sql, policy);
      const deviceId = unique("probe");
      const now = Date.now();
      for (const cpu of [10, 30, 60]) expect(metrics.ingest(deviceId, sample(cpu), now).stored).toBe(true);
      expect(metrics.history(deviceId, new Date(now - 1).toISOString()).map((row) => row.cpu)).toEqual([10, 30, 60]);
    });
  });

  it("are carried over from the layout of earlier hubs, rows and order kept", async () => {
    await runInDurableObject(hub(unique("ROWS").toUpperCase()), async (_instance, state) => {
      const sql = state.storage.sql;
      sql.exec("DROP TABLE metrics_history");
      sql.exec(`CREATE TABLE metrics_history (id INTEGER PRIMARY KEY AUTOINCREMENT, device_id TEXT NOT NULL, recorded_at TEXT NOT NULL,
        cpu REAL NOT NULL, memory REAL NOT NULL, disk REAL NOT NULL, temperature REAL, latency REAL, transaction_count INTEGER,
        uptime_s INTEGER, error_rate REAL, reason TEXT NOT NULL)`);
      sql.exec("CREATE INDEX metrics_history_device_time ON metrics_history (device_id, recorded_at)");
      for (const cpu of [11, 22, 33]) sql.exec("INSERT INTO metrics_history (device_id, recorded_at, cpu, memory, disk, reason) VALUES ('old', '2026-11-01T00:00:00.000Z', ?, 1, 2, 'changed')", cpu);
      sql.exec("DROP TABLE live_events");
      sql.exec("CREATE TABLE live_events (seq INTEGER PRIMARY KEY AUTOINCREMENT, type TEXT NOT NULL, ts TEXT NOT NULL, data TEXT NOT NULL)");
      for (let i = 0; i < 3; i++) sql.exec("INSERT INTO live_events (type, ts, data) VALUES ('old', '2026-11-01T00:00:00.000Z', '{}')");

      migrateMetricsHistory(sql);
      migrateLiveEvents(sql);
      migrateMetricsHistory(sql);
      migrateLiveEvents(sql);

      const metrics = new MetricsStore(sql, policy);
      expect(metrics.history("old", "2026-10-01T00:00:00.000Z").map((row) => row.cpu)).toEqual([11, 22, 33]);
      expect(sql.exec<{ name: string }>("SELECT name FROM sqlite_master WHERE name LIKE 'metrics_history%' OR name LIKE 'live_events%' ORDER BY name").toArray().map((r) => r.name))
        .toEqual(["live_events", "metrics_history"]);
      const ring = new LiveRing(sql, () => "SITE");
      expect(ring.since(0).map((event) => event.seq)).toEqual([1, 2, 3]);
      expect(ring.append("new", {}, Date.now()).seq).toBe(4);
      expect(sql.exec<{ sql: string }>("SELECT sql FROM sqlite_master WHERE name = 'live_events'").one().sql).not.toMatch(/AUTOINCREMENT/i);
    });
  });
});
