// Serves the BUILT Worker bundle (dist/, from `npm run build` = `wrangler deploy --dry-run --outdir dist`)
// with workerd through Miniflare's API — the production bundle, not `wrangler dev` and its proxy.
//
//   import { startService } from "./scripts/lib/serve-bundle.mjs";
//   const service = await startService();            // ephemeral port on 127.0.0.1
//   await fetch(`${service.url}/health`);            // real HTTP (and WebSocket: ws://...)
//   await service.stop();
//
// What it sets up, from wrangler.toml (read with wrangler's own config reader, so the two cannot drift):
// compatibility date and flags, every [vars] entry, the D1 database `DB` (in memory, with every
// migrations/*.sql applied in order), the SiteHub Durable Object (SQLite-backed, class exported by the
// bundle) and the static assets of public/ in front of the Worker, as on Cloudflare. JWT_SECRET is a
// fresh random 48-byte secret unless `bindings.JWT_SECRET` is given. Nothing persists after stop().
//
// Used by the OpenAPI lint, the end-to-end tests and the benchmark.
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Log, LogLevel, Miniflare } from "miniflare";
import { unstable_getMiniflareWorkerOptions, unstable_splitSqlQuery } from "wrangler";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** A secret of the kind `npm start` writes into .dev.vars: 48 random bytes, base64url. */
export const generateSecret = () => randomBytes(48).toString("base64url");

/** migrations/*.sql in numeric order, each split into statements the way wrangler does. */
export function readMigrations(dir = join(ROOT, "migrations")) {
  return readdirSync(dir)
    .filter((name) => name.endsWith(".sql"))
    .sort((a, b) => parseInt(a, 10) - parseInt(b, 10) || a.localeCompare(b))
    .map((name) => ({ name, queries: unstable_splitSqlQuery(readFileSync(join(dir, name), "utf8")) }));
}

/** Applies every migration to a D1 binding; each file is one atomic batch. Returns the names applied. */
export async function applyMigrations(db, migrations = readMigrations()) {
  for (const { name, queries } of migrations) {
    const statements = queries.map((q) => q.trim()).filter(Boolean);
    if (statements.length === 0) continue;
    try {
      await db.batch(statements.map((q) => db.prepare(q)));
    } catch (error) {
      throw new Error(`Migration ${name} failed: ${error?.message ?? error}`, { cause: error });
    }
  }
  return migrations.map((m) => m.name);
}

function newestMtime(dir) {
  let newest = 0;
  if (!existsSync(dir)) return newest;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestMtime(path) : statSync(path).mtimeMs);
  }
  return newest;
}

/**
 * Starts the bundled Worker. Options:
 * - port (default 0 = ephemeral), host (default 127.0.0.1)
 * - bindings: extra/overriding vars and secrets (e.g. { REQUEST_LOG_ENABLED: "false" }); a value of
 *   `undefined` removes a var that wrangler.toml sets
 * - assets (default true): serve public/ in front of the Worker like Cloudflare does; false sends every
 *   request straight to the Worker (no asset lookup on the path; /vendor/... then answers the Worker's 404)
 * - migrate (default true): apply migrations/*.sql to the in-memory D1
 * - env: a wrangler environment name (e.g. "production") whose vars to use
 * - quiet (default false): discard the Worker's console output (for benchmarks)
 * - logLevel: Miniflare's own log level (default WARN)
 * - dist, config: paths of the bundle directory and wrangler config (defaults: dist/, wrangler.toml)
 * - direct (default false): also listen on a socket of the Worker's own, `directUrl`, that skips
 *   Miniflare's development entry worker (benchmarks read latency there: see bench/lib.mjs, `paced`)
 * - miniflare: more Miniflare worker options, e.g. `{ analyticsEngineDatasets: { REQUEST_LOG_AE: { dataset: "x" } } }`
 * Resolves to { url, directUrl, mf, env, stop, scheduled }: `url` has no trailing slash; `mf` is the Miniflare
 * instance (mf.getD1Database("DB"), mf.getDurableObjectNamespace("SITE_HUB"), ...); `scheduled(cron?)`
 * runs the Worker's cron handler once; `stop()` disposes everything.
 */
export async function startService(options = {}) {
  const {
    port = 0,
    host = "127.0.0.1",
    bindings = {},
    assets = true,
    migrate = true,
    env,
    quiet = false,
    direct = false,
    logLevel = LogLevel.WARN,
    dist = join(ROOT, "dist"),
    config = join(ROOT, "wrangler.toml"),
    miniflare = {},
  } = options;

  const scriptPath = join(dist, "index.js");
  if (!existsSync(scriptPath)) {
    throw new Error(`The built bundle ${scriptPath} does not exist. Run \`npm run build\` first (wrangler deploy --dry-run --outdir dist).`);
  }
  const builtAt = statSync(scriptPath).mtimeMs;
  const sourcesAt = Math.max(newestMtime(join(ROOT, "src")), newestMtime(join(ROOT, "durable-objects")));
  if (sourcesAt > builtAt && !quiet) {
    console.warn(`[serve-bundle] warning: ${scriptPath} is older than the sources; run \`npm run build\` to serve the current code.`);
  }

  const { workerOptions } = unstable_getMiniflareWorkerOptions(config, env);
  const vars = { ...workerOptions.bindings, JWT_SECRET: generateSecret(), ...bindings };
  for (const [key, value] of Object.entries(vars)) if (value === undefined) delete vars[key];

  if (assets && workerOptions.assets && !existsSync(workerOptions.assets.directory)) {
    throw new Error(`The assets directory ${workerOptions.assets.directory} does not exist. Run \`node scripts/vendor-docs-assets.mjs\` (npm run build does).`);
  }

  const mf = new Miniflare({
    ...workerOptions,
    name: "fleet-edge",
    modules: true,
    scriptPath,
    modulesRoot: dist,
    bindings: vars,
    assets: assets ? workerOptions.assets : undefined,
    host,
    port,
    cf: false, // no request.cf lookup over the network: this machine has none
    log: new Log(logLevel),
    ...(quiet ? { handleRuntimeStdio: (stdout, stderr) => { stdout.resume(); stderr.resume(); } } : {}),
    ...(direct ? { unsafeDirectSockets: [{ host, port: 0 }] } : {}),
    ...miniflare,
  });

  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await mf.dispose();
  };

  try {
    const ready = await mf.ready;
    if (migrate) await applyMigrations(await mf.getD1Database("DB"));
    const url = ready.href.replace(/\/$/, "");
    const scheduled = async (cron = "* * * * *", scheduledTime = Date.now()) => {
      const worker = await mf.getWorker();
      return worker.scheduled({ cron, scheduledTime: new Date(scheduledTime) });
    };
    const directUrl = direct ? (await mf.unsafeGetDirectURL("fleet-edge")).href.replace(/\/$/, "") : undefined;
    return { url, directUrl, mf, env: vars, stop, scheduled };
  } catch (error) {
    await stop().catch(() => {});
    throw error;
  }
}
