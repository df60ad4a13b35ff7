// The cost bench's entry module: serves the BUILT bundle (./index.js, copied beside this file) unchanged,
// and counts what Cloudflare bills, at the two boundaries where the platform meters it:
//   - the Worker: every request that reaches `fetch` is one Worker request; every call the Worker makes
//     on a SiteHub stub (RPC method or fetch) is one Durable Object request (it wraps env.SITE_HUB);
//   - the SiteHub (a subclass of the bundle's class): incoming WebSocket messages and alarm runs, which
//     Durable Objects also bill; rows its SQLite cursors read and wrote; its storage size.
//   - D1, on both sides: rows_read and rows_written from the meta D1 returns with every result.
//     A `raw()` query (Drizzle's selects) returns no meta: it is counted apart, with the rows it returned.
// `GET /__bench/counts?sites=A,B` answers the Worker's counts and each named hub's; `POST /__bench/reset`
// zeroes the Worker's and `?sites=` hubs'. Nothing here is part of the service.
import app, { SiteHub as BundledSiteHub } from "./index.js";

export * from "./index.js";

const zeroD1 = () => ({ queries: 0, rows_read: 0, rows_written: 0, raw_queries: 0, raw_rows_returned: 0 });
let worker = { requests: 0, do_requests: 0, do_by_method: {}, d1: zeroD1() };

function tallyMeta(d1, meta) {
  d1.queries++;
  d1.rows_read += meta?.rows_read ?? 0;
  d1.rows_written += meta?.rows_written ?? 0;
}

/** A D1 binding that adds every result's meta to `counts()` (a function, so a reset takes effect). */
function countingD1(db, counts) {
  const statement = (stmt) => ({
    real: stmt,
    bind: (...args) => statement(stmt.bind(...args)),
    async all() { const r = await stmt.all(); tallyMeta(counts(), r.meta); return r; },
    async run() { const r = await stmt.run(); tallyMeta(counts(), r.meta); return r; },
    async first(column) {
      const r = await stmt.all();
      tallyMeta(counts(), r.meta);
      const row = r.results[0];
      if (row === undefined) return null;
      return column === undefined ? row : (row[column] ?? null);
    },
    async raw(options) {
      const rows = await stmt.raw(options);
      counts().raw_queries++;
      counts().raw_rows_returned += rows.length;
      return rows;
    },
  });
  return {
    prepare: (query) => statement(db.prepare(query)),
    async batch(statements) {
      const results = await db.batch(statements.map((s) => s.real ?? s));
      for (const r of results) tallyMeta(counts(), r.meta);
      return results;
    },
    exec: (query) => db.exec(query),
    dump: () => db.dump(),
    withSession: (...args) => db.withSession(...args),
  };
}

/** The SiteHub namespace, counting every call the Worker makes on a stub. */
function countingNamespace(ns) {
  const wrapStub = (stub) => new Proxy(stub, {
    get(target, property) {
      const value = target[property];
      if (typeof value !== "function" || typeof property !== "string") return value;
      // Called on the stub itself: an RPC method taken off its stub does not survive being re-bound.
      return (...args) => {
        worker.do_requests++;
        worker.do_by_method[property] = (worker.do_by_method[property] ?? 0) + 1;
        return target[property](...args);
      };
    },
  });
  return new Proxy(ns, {
    get(target, property) {
      if (property === "get") return (id, options) => wrapStub(target.get(id, options));
      if (property === "getByName") return (name, options) => wrapStub(target.getByName(name, options));
      const value = target[property];
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

const zeroHub = () => ({ websocket_messages: 0, alarms: 0, sql_rows_read: 0, sql_rows_written: 0, d1: zeroD1() });

export class SiteHub extends BundledSiteHub {
  constructor(ctx, env) {
    // Every cursor the hub opens is kept until the next count, which reads its rows read and written.
    const cursors = [];
    const sql = ctx.storage.sql;
    const exec = sql.exec.bind(sql);
    sql.exec = (...args) => {
      const cursor = exec(...args);
      cursors.push(cursor);
      return cursor;
    };
    super(ctx, env);
    this.benchCursors = cursors;
    this.bench = zeroHub();
    this.database = countingD1(env.DB, () => this.bench.d1);
  }

  async webSocketMessage(ws, message) {
    this.bench.websocket_messages++;
    return super.webSocketMessage(ws, message);
  }

  async alarm() {
    this.bench.alarms++;
    return super.alarm();
  }

  async benchCounts(reset = false) {
    for (const cursor of this.benchCursors.splice(0)) {
      this.bench.sql_rows_read += cursor.rowsRead;
      this.bench.sql_rows_written += cursor.rowsWritten;
    }
    const counts = { ...this.bench, storage_bytes: this.ctx.storage.sql.databaseSize };
    if (reset) this.bench = zeroHub();
    return counts;
  }
}

const sitesOf = (url) => (url.searchParams.get("sites") ?? "").split(",").filter(Boolean);

export default {
  ...app,
  async fetch(request, env, ctx) {
    const url = new URL(request.url);
    if (url.pathname === "/__bench/counts" || url.pathname === "/__bench/reset") {
      const reset = url.pathname === "/__bench/reset";
      const hubs = {};
      for (const site of sitesOf(url)) hubs[site] = await env.SITE_HUB.get(env.SITE_HUB.idFromName(site)).benchCounts(reset);
      const answer = { worker, hubs };
      if (reset) worker = { requests: 0, do_requests: 0, do_by_method: {}, d1: zeroD1() };
      return Response.json(answer);
    }
    worker.requests++;
    return app.fetch(request, { ...env, DB: countingD1(env.DB, () => worker.d1), SITE_HUB: countingNamespace(env.SITE_HUB) }, ctx);
  },
};
