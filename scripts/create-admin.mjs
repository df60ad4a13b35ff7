// `npm run create-admin -- --email E --password P [--username U] [--full-name N] [--remote] [--env NAME] [--reset-password]`
//
// Administrators cannot be created through the public API (signup never grants admin). This creates the
// user as an administrator, or promotes an existing user with that e-mail, in the local D1 database
// (.wrangler/state, the one `npm start` serves) or, with --remote, in the deployed one. It applies the
// migrations first, so it works right after `npm ci`, with or without the server running.
//
// The password follows the API's rules (6 characters to 72 UTF-8 bytes) and is stored as a bcrypt hash
// (cost 10, bcryptjs, as the Worker does). An existing user's password is left alone unless
// --reset-password is given. The grant is recorded in the audit trail (admin_action).
// The password may also come from the ADMIN_PASSWORD environment variable (keeps it out of shell history).
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import bcrypt from "bcryptjs";
import { z } from "zod";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(root, "package.json"));
const wrangler = join(dirname(require.resolve("wrangler/package.json")), "bin", "wrangler.js");

const USAGE = `Usage: npm run create-admin -- --email EMAIL --password PASSWORD [options]

Creates an administrator, or promotes the existing user with that e-mail.

Options:
  --email EMAIL        the administrator's e-mail (login name)
  --password PASSWORD  6 characters to 72 UTF-8 bytes (or set ADMIN_PASSWORD instead)
  --username NAME      username for a new user (default: the e-mail's local part)
  --full-name NAME     full name for a new user
  --reset-password     also set the password of an existing user
  --remote             use the deployed D1 database instead of the local one
  --env NAME           a wrangler environment of wrangler.toml (e.g. production)
  --help               this text`;

function fail(message, code = 2) {
  console.error(`create-admin: ${message}`);
  process.exit(code);
}

// ---- arguments -------------------------------------------------------------------------------
const FLAGS = new Set(["remote", "reset-password", "help"]);
const VALUES = new Set(["email", "password", "username", "full-name", "env"]);
const args = {};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const match = /^--([a-z-]+)(?:=(.*))?$/s.exec(argv[i]);
  if (!match) fail(`unexpected argument "${argv[i]}"\n\n${USAGE}`);
  const [, name, inline] = match;
  if (FLAGS.has(name)) {
    if (inline !== undefined) fail(`--${name} takes no value`);
    args[name] = true;
  } else if (VALUES.has(name)) {
    const value = inline ?? argv[++i];
    if (value === undefined) fail(`--${name} needs a value`);
    args[name] = value;
  } else {
    fail(`unknown option --${name}\n\n${USAGE}`);
  }
}
if (args.help) {
  console.log(USAGE);
  process.exit(0);
}

// ---- validation (the same rules as the API's signup) ------------------------------------------
const utf8Length = (text) => Buffer.byteLength(text, "utf8");
const Input = z.object({
  email: z.email("must be a valid e-mail address").max(254),
  password: z
    .string({ error: "is required (--password or ADMIN_PASSWORD)" })
    .min(6, "must be at least 6 characters")
    .refine((p) => utf8Length(p) <= 72, "must be at most 72 UTF-8 bytes (bcrypt's limit; it is never truncated)"),
  username: z.string().min(1).max(64).regex(/^[\w.@+-]+$/, "may contain letters, digits and . _ @ + - only").optional(),
  fullName: z.string().max(200).optional(),
});
const parsed = Input.safeParse({
  email: args.email,
  password: args.password ?? process.env.ADMIN_PASSWORD,
  username: args.username,
  fullName: args["full-name"],
});
if (!parsed.success) {
  const lines = parsed.error.issues.map((issue) => `  --${issue.path.join(".") === "fullName" ? "full-name" : issue.path.join(".")}: ${issue.message}`);
  fail(`invalid input:\n${lines.join("\n")}\n(npm run create-admin -- --help for usage)`);
}
const input = parsed.data;
const email = input.email.toLowerCase();
const username = input.username ?? email.split("@")[0];
const where = args.remote ? "--remote" : "--local";
const envArgs = args.env ? ["--env", args.env] : [];
const whereLabel = args.remote ? "the remote (deployed) D1 database" : "the local D1 database (.wrangler/state)";

// ---- wrangler ---------------------------------------------------------------------------------
const env = { WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false", ...process.env, CI: "true" };

function wranglerRun(args, { capture = false } = {}) {
  const result = spawnSync(process.execPath, [wrangler, ...args], {
    cwd: root,
    env,
    encoding: "utf8",
    stdio: capture ? ["ignore", "pipe", "pipe"] : ["ignore", "inherit", "inherit"],
    maxBuffer: 16 * 1024 * 1024,
  });
  if (result.status !== 0) {
    if (capture) process.stderr.write(`${result.stdout ?? ""}${result.stderr ?? ""}`);
    fail(`wrangler ${args.slice(0, 3).join(" ")} failed (${result.signal ?? `exit ${result.status}`})`, 1);
  }
  return result.stdout;
}

/** Runs SQL through `wrangler d1 execute --json` and returns the rows of the last statement. */
function query(sql) {
  const out = wranglerRun(["d1", "execute", "DB", where, ...envArgs, "--yes", "--json", "--command", sql], { capture: true });
  let results;
  try {
    results = JSON.parse(out);
  } catch {
    process.stderr.write(out);
    fail("could not read wrangler's JSON output", 1);
  }
  const last = Array.isArray(results) ? results[results.length - 1] : results;
  if (last && last.success === false) fail(`SQL failed: ${JSON.stringify(last)}`, 1);
  return last?.results ?? [];
}

/** A SQL string literal: single quotes doubled; NUL cannot be stored safely, so it is refused. */
function sqlString(value) {
  if (value === null || value === undefined) return "NULL";
  const text = String(value);
  if (text.includes("\u0000")) fail("values may not contain NUL characters");
  return `'${text.replace(/'/g, "''")}'`;
}

// ---- do it ------------------------------------------------------------------------------------
console.log(`Applying D1 migrations to ${whereLabel}...`);
wranglerRun(["d1", "migrations", "apply", "DB", where, ...envArgs]);

// E-mails and usernames are unique regardless of case. An account from before e-mails were stored in
// lower case may be spelled with capitals: it is the same account (the exact spelling first, then the oldest).
const sameEmail = `lower(email) = ${sqlString(email)} ORDER BY email = ${sqlString(email)} DESC, case_fold_exempt, id LIMIT 1`;
const existing = query(`SELECT id, email, username, is_admin, is_active FROM users WHERE ${sameEmail}`)[0];
if (!existing) {
  const taken = query(`SELECT email FROM users WHERE lower(username) = lower(${sqlString(username)})`)[0];
  if (taken) fail(`the username "${username}" is already used by another account; choose one with --username`);
}

const passwordHash = await bcrypt.hash(input.password, 10);
const now = "strftime('%Y-%m-%dT%H:%M:%fZ','now')";
const action = existing ? (existing.is_admin ? "already_admin" : "promoted") : "created";
const metadata = JSON.stringify({
  action: { created: "admin_created", promoted: "admin_promoted", already_admin: "admin_password_reset" }[action],
  email,
  password_reset: Boolean(existing && args["reset-password"]),
  source: `npm run create-admin (${args.remote ? "remote" : "local"})`,
});

const statements = [
  existing
    ? `UPDATE users SET is_admin = 1,
         ${args["reset-password"] ? `password_hash = ${sqlString(passwordHash)},` : ""}
         updated_at = ${now}
       WHERE id = ${Number(existing.id)}`
    // One statement creates or promotes: a user created concurrently by signup is promoted, never duplicated.
    : `INSERT INTO users (email, username, full_name, password_hash, is_admin, is_active)
         VALUES (${sqlString(email)}, ${sqlString(username)}, ${sqlString(input.fullName ?? null)}, ${sqlString(passwordHash)}, 1, 1)
         ON CONFLICT(email) DO UPDATE SET is_admin = 1,
           ${args["reset-password"] ? "password_hash = excluded.password_hash," : ""}
           updated_at = ${now}`,
  `SELECT id, email, username, is_admin, is_active FROM users WHERE ${sameEmail}`,
];
// Nothing changed for an administrator whose password is kept: nothing to audit.
if (action !== "already_admin" || args["reset-password"]) {
  statements.splice(1, 0, `INSERT INTO audit_logs (event_type, category, severity, description, user_id, event_metadata)
     SELECT 'admin_action', 'user_actions', ${args["reset-password"] && existing ? "'warning'" : "'info'"},
            ${sqlString(`Administrator ${email} ${action === "created" ? "created" : action === "promoted" ? "granted administrator rights" : "password reset"} with create-admin`)},
            id, ${sqlString(metadata)}
     FROM users WHERE ${sameEmail}`);
}
const [user] = query(statements.join(";\n"));
if (!user || !user.is_admin) fail(`the user ${email} is not an administrator after the update (got ${JSON.stringify(user)})`, 1);

const verb = action === "created" ? "Created administrator" : action === "promoted" ? "Promoted existing user to administrator:" : "Already an administrator:";
console.log(`\n✔ ${verb} ${user.email} (id ${user.id}, username ${user.username}) in ${whereLabel}.`);
if (existing && !args["reset-password"]) console.log("  The existing password was kept (use --reset-password to set the one given).");
if (existing && args["reset-password"]) console.log("  The password was reset to the one given.");
if (!user.is_active) console.log("  Warning: this account is deactivated (is_active = 0) and cannot log in until it is reactivated.");
console.log(`  Log in with POST /api/v1/auth/login {"email": "${user.email}", "password": "..."}.`);
