// Rows written in a hub's SQLite are billed one by one, and presence is written on every device
// call: these tests count what the hot path writes, through the cursor counts the runtime bills by.
import { describe, expect, it } from "vitest";
import { runInDurableObject } from "cloudflare:test";
import { Presence } from "../../durable-objects/presence";
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
