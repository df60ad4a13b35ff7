import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";

// This file winds the database back to before migrations/0005_bounds.sql, fills it with rows that
// break the new rules, and applies the migration again. Storage is per test file, so no other
// file sees the rewound schema.

const MIGRATION = "0005_bounds.sql";

const UNDO = [
  "DROP INDEX users_email_ci_uq",
  "DROP INDEX users_username_ci_uq",
  "DROP INDEX sites_site_id_ci_uq",
  "DROP INDEX devices_device_id_ci_uq",
  "DROP INDEX jobs_idem_uq",
  "ALTER TABLE users DROP COLUMN case_fold_exempt",
  "ALTER TABLE sites DROP COLUMN case_fold_exempt",
  "ALTER TABLE devices DROP COLUMN case_fold_exempt",
  "ALTER TABLE jobs DROP COLUMN idempotency_key",
  "ALTER TABLE jobs DROP COLUMN request_fingerprint",
];

const rows = <T>(query: string, ...args: unknown[]) => env.DB.prepare(query).bind(...args).all<T>().then((r) => r.results);

describe("migration 0005 (case-insensitive identities, job idempotency)", () => {
  it("applies over rows that already differ only in case, keeps every one, and enforces the rule from then on", async () => {
    const migration = env.TEST_MIGRATIONS.find((m) => m.name === MIGRATION);
    expect(migration, "the migration is applied by the test pool").toBeDefined();
    await env.DB.batch(UNDO.map((q) => env.DB.prepare(q)));

    await env.DB.batch([
      env.DB.prepare("INSERT INTO users (id, email, username) VALUES (1, 'Ann@Example.com', 'ann'), (2, 'ann@example.com', 'ann_2'), (3, 'bob@example.com', 'ANN'), (4, 'carl@example.com', 'carl')"),
      env.DB.prepare("INSERT INTO sites (id, site_id, name) VALUES (1, 'STORE-1', 'a'), (2, 'store-1', 'b'), (3, 'Store-1', 'c'), (4, 'STORE-2', 'd')"),
      env.DB.prepare("INSERT INTO devices (id, device_id, site_id, name) VALUES (1, 'POS-1', 'STORE-1', 'a'), (2, 'pos-1', 'store-1', 'b'), (3, 'POS-2', 'STORE-1', 'c')"),
      env.DB.prepare("INSERT INTO jobs (job_id, site_id, action) VALUES ('job-1', 'STORE-1', 'restart')"),
    ]);

    await env.DB.batch(migration!.queries.map((q) => env.DB.prepare(q)));

    expect(await rows("SELECT id, case_fold_exempt AS exempt FROM users ORDER BY id")).toEqual([
      { id: 1, exempt: 0 }, { id: 2, exempt: 2 }, { id: 3, exempt: 3 }, { id: 4, exempt: 0 },
    ]);
    expect(await rows("SELECT id, case_fold_exempt AS exempt FROM sites ORDER BY id")).toEqual([
      { id: 1, exempt: 0 }, { id: 2, exempt: 2 }, { id: 3, exempt: 3 }, { id: 4, exempt: 0 },
    ]);
    expect(await rows("SELECT id, case_fold_exempt AS exempt FROM devices ORDER BY id")).toEqual([
      { id: 1, exempt: 0 }, { id: 2, exempt: 2 }, { id: 3, exempt: 0 },
    ]);
    expect(await rows("SELECT job_id, idempotency_key, request_fingerprint FROM jobs")).toEqual([
      { job_id: "job-1", idempotency_key: null, request_fingerprint: null },
    ]);

    const insert = (query: string) => env.DB.prepare(query).run().then(() => "ok", (e: Error) => e.message);
    expect(await insert("INSERT INTO users (email, username) VALUES ('ANN@example.com', 'someone')")).toMatch(/UNIQUE/);
    expect(await insert("INSERT INTO users (email, username) VALUES ('dora@example.com', 'Carl')")).toMatch(/UNIQUE/);
    expect(await insert("INSERT INTO sites (site_id, name) VALUES ('store-2', 'x')")).toMatch(/UNIQUE/);
    expect(await insert("INSERT INTO devices (device_id, site_id, name) VALUES ('pos-2', 'STORE-1', 'x')")).toMatch(/UNIQUE/);
    expect(await insert("INSERT INTO jobs (job_id, site_id, action, idempotency_key) VALUES ('job-2', 'STORE-1', 'restart', 'k')")).toBe("ok");
    expect(await insert("INSERT INTO jobs (job_id, site_id, action, idempotency_key) VALUES ('job-3', 'STORE-1', 'restart', 'k')")).toMatch(/UNIQUE/);
    // new names that collide with nothing still go in
    expect(await insert("INSERT INTO users (email, username) VALUES ('dora@example.com', 'dora')")).toBe("ok");
    expect(await insert("INSERT INTO sites (site_id, name) VALUES ('STORE-3', 'x')")).toBe("ok");
  });
});
