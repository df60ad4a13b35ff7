import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { readConfig } from "../../src/shared/config";
import { RETAINED_TABLES, RETENTION_BATCH_ROWS, RETENTION_MAX_BATCHES, pruneTable } from "../../src/services/analytics-retention";
import { unique } from "./helpers";
import { runCron } from "./commands-helpers";

const DAY = 86_400_000;
const iso = (ms: number) => new Date(ms).toISOString();

/**
 * One row per table at the given instant, each findable by `tag` (in a text column of its key or a
 * column nothing else uses), so the test can tell exactly which rows a run removed.
 */
const seeders: Record<string, { insert: (tag: string, at: string) => string; count: (tag: string) => string }> = {
  api_request_logs: {
    insert: (tag, at) => `INSERT INTO api_request_logs (endpoint, method, status_code, response_time_ms, created_at) VALUES ('${tag}', 'GET', 200, 1, '${at}')`,
    count: (tag) => `SELECT count(*) AS n FROM api_request_logs WHERE endpoint = '${tag}'`,
  },
  user_activities: {
    insert: (tag, at) => `INSERT INTO user_activities (user_id, activity_type, created_at) VALUES (1, '${tag}', '${at}')`,
    count: (tag) => `SELECT count(*) AS n FROM user_activities WHERE activity_type = '${tag}'`,
  },
  device_state_history: {
    insert: (tag, at) => `INSERT INTO device_state_history (device_id, new_state, changed_by, created_at) VALUES ('${tag}', 'online', 'system', '${at}')`,
    count: (tag) => `SELECT count(*) AS n FROM device_state_history WHERE device_id = '${tag}'`,
  },
  job_outcomes: {
    insert: (tag, at) => `INSERT INTO job_outcomes (job_id, status, created_at) VALUES ('${tag}', 'completed', '${at}')`,
    count: (tag) => `SELECT count(*) AS n FROM job_outcomes WHERE job_id = '${tag}'`,
  },
  error_logs: {
    insert: (tag, at) => `INSERT INTO error_logs (category, error_message, created_at) VALUES ('api', '${tag}', '${at}')`,
    count: (tag) => `SELECT count(*) AS n FROM error_logs WHERE error_message = '${tag}'`,
  },
  request_rollups: {
    insert: (tag, at) => `INSERT INTO request_rollups (period, bucket_start, route, method, status_class, count, sum_ms, min_ms, max_ms, histogram)
      VALUES ('hour', '${at}', '${tag}', 'GET', 2, 1, 1, 1, 1, '{}'), ('day', '${at}', '${tag}', 'GET', 2, 1, 1, 1, 1, '{}')`,
    count: (tag) => `SELECT count(*) AS n FROM request_rollups WHERE route = '${tag}'`,
  },
  job_outcome_rollups: {
    insert: (tag, at) => `INSERT INTO job_outcome_rollups (period, bucket_start, site_id, job_type, scope, status, count, timed_count, sum_duration_ms, histogram)
      VALUES ('hour', '${at}', '${tag}', 'x', 'job', 'completed', 1, 0, 0, '{}'), ('day', '${at}', '${tag}', 'x', 'job', 'completed', 1, 0, 0, '{}')`,
    count: (tag) => `SELECT count(*) AS n FROM job_outcome_rollups WHERE site_id = '${tag}'`,
  },
  error_rollups: {
    insert: (tag, at) => `INSERT INTO error_rollups (bucket_start, category, severity, count) VALUES ('${at}', '${tag}', 'error', 1)`,
    count: (tag) => `SELECT count(*) AS n FROM error_rollups WHERE category = '${tag}'`,
  },
  error_report_windows: {
    insert: (tag, at) => `INSERT INTO error_report_windows (window_start, client_key, reports) VALUES ('${at}', '${tag}', 1)`,
    count: (tag) => `SELECT count(*) AS n FROM error_report_windows WHERE client_key = '${tag}'`,
  },
};

const count = async (query: string) => (await env.DB.prepare(query).first<{ n: number }>())!.n;

describe("analytics retention", () => {
  it("covers every analytics table", () => {
    expect(RETAINED_TABLES.map((t) => t.table).sort()).toEqual(Object.keys(seeders).sort());
  });

  it("deletes exactly what is older than each table's window: a millisecond older goes, the boundary itself stays", async () => {
    const now = Date.now();
    const config = readConfig(env);
    const tags: Record<string, { older: string; boundary: string; newer: string }> = {};
    for (const retained of RETAINED_TABLES) {
      const cutoff = now - retained.keepMs(config);
      const t = (tags[retained.table] = { older: unique("old-"), boundary: unique("edge-"), newer: unique("new-") });
      const seed = seeders[retained.table];
      await env.DB.batch([
        env.DB.prepare(seed.insert(t.older, iso(cutoff - 1))),
        env.DB.prepare(seed.insert(t.boundary, iso(cutoff))),
        env.DB.prepare(seed.insert(t.newer, iso(cutoff + 1))),
      ]);
    }
    await runCron(now);
    for (const retained of RETAINED_TABLES) {
      const t = tags[retained.table];
      const seed = seeders[retained.table];
      expect([await count(seed.count(t.older)), await count(seed.count(t.boundary)) > 0, await count(seed.count(t.newer)) > 0], retained.table).toEqual([0, true, true]);
    }
  });

  it("keeps 90 days of analytics and 7 of raw request log by default, and follows ANALYTICS_RETENTION_DAYS and REQUEST_LOG_RETENTION_DAYS", () => {
    const keep = (vars: Record<string, string | undefined>) => {
      const config = readConfig({ ...env, ...vars });
      return Object.fromEntries(RETAINED_TABLES.map((t) => [t.table, t.keepMs(config) / DAY]));
    };
    const defaults = keep({});
    expect(defaults.api_request_logs).toBe(7);
    for (const table of ["user_activities", "device_state_history", "job_outcomes", "error_logs", "request_rollups", "job_outcome_rollups", "error_rollups"]) {
      expect(defaults[table], table).toBe(90);
    }
    const custom = keep({ ANALYTICS_RETENTION_DAYS: "30", REQUEST_LOG_RETENTION_DAYS: "2" });
    expect([custom.api_request_logs, custom.error_logs, custom.request_rollups]).toEqual([2, 30, 30]);
    // Malformed or out of range: the default.
    expect(keep({ ANALYTICS_RETENTION_DAYS: "-3", REQUEST_LOG_RETENTION_DAYS: "soon" }).error_logs).toBe(90);
  });

  it("works in bounded batches: one run removes at most batch × batches rows, the next goes on", async () => {
    const tag = unique("bulk-");
    const old = iso(Date.now() - 200 * DAY);
    const limit = RETENTION_BATCH_ROWS * RETENTION_MAX_BATCHES;
    await env.DB.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
       INSERT INTO error_rollups (bucket_start, category, severity, count) SELECT ?2, ?3, 'error-' || i, 1 FROM n`,
    ).bind(limit + 500, old, tag).run();
    const errorRollups = RETAINED_TABLES.find((t) => t.table === "error_rollups")!;
    const config = readConfig(env);
    expect(await pruneTable(env.DB, errorRollups, config, new Date())).toBe(limit);
    expect(await count(seeders.error_rollups.count(tag))).toBe(500);
    // (Rows other tests left past the cutoff may go in the same run.)
    expect(await pruneTable(env.DB, errorRollups, config, new Date())).toBeGreaterThanOrEqual(500);
    expect(await count(seeders.error_rollups.count(tag))).toBe(0);
  });
});
