// Lints the OpenAPI document of the BUILT Worker: serves dist/ with workerd (scripts/lib/serve-bundle.mjs),
// fetches /openapi.json, writes it pretty-printed to dist/openapi.json and runs `redocly lint` on it with
// redocly.yaml. Prints problems as `severity rule  METHOD /path  message` (every error; up to 5 warnings
// per rule unless --verbose) and exits non-zero when there is any error (with --strict, also on warnings).
//
//   npm run lint:openapi            # npm run build first
//   npm run lint:openapi -- --strict     # warnings fail too
//   npm run lint:openapi -- --verbose    # every warning, not 5 per rule
//   node scripts/lint-openapi.mjs --file some.json   # lint a saved document instead of the served one
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join, relative, resolve } from "node:path";
import { ROOT, startService } from "./lib/serve-bundle.mjs";

const strict = process.argv.includes("--strict");
const verbose = process.argv.includes("--verbose");

const fileArg = process.argv.indexOf("--file");
const out = fileArg > 0 ? resolve(process.argv[fileArg + 1]) : join(ROOT, "dist", "openapi.json");
let document;
if (fileArg > 0) {
  // Lint a document from a file instead of the served one (for checking the linter itself).
  document = JSON.parse(readFileSync(process.argv[fileArg + 1], "utf8"));
} else {
  const service = await startService({ quiet: true });
  try {
    const response = await fetch(`${service.url}/openapi.json`);
    const text = await response.text();
    if (response.status !== 200) throw new Error(`GET /openapi.json answered ${response.status}: ${text.slice(0, 500)}`);
    document = JSON.parse(text);
  } finally {
    await service.stop();
  }
}
if (fileArg < 0) {
  mkdirSync(join(ROOT, "dist"), { recursive: true });
  writeFileSync(out, `${JSON.stringify(document, null, 2)}\n`);
}

const require = createRequire(join(ROOT, "package.json"));
const cli = join(require.resolve("@redocly/cli/package.json"), "..", "bin", "cli.js");
const result = spawnSync(process.execPath, [cli, "lint", out, "--config", join(ROOT, "redocly.yaml"), "--format", "json", "--max-problems", "10000"], {
  cwd: ROOT,
  encoding: "utf8",
  maxBuffer: 64 * 1024 * 1024,
  env: {
    ...process.env,
    REDOCLY_TELEMETRY: "off",
    REDOCLY_SUPPRESS_UPDATE_NOTICE: "true",
    REDOCLY_SUPPRESS_NOTIFICATIONS: "true",
  },
});

let report;
try {
  report = JSON.parse(result.stdout);
} catch {
  // Not a lint report: the CLI itself failed (bad config, crash). Show what it said.
  process.stdout.write(result.stdout ?? "");
  process.stderr.write(result.stderr ?? "");
  console.error(`redocly lint did not produce a report (exit ${result.status}${result.error ? `, ${result.error.message}` : ""})`);
  process.exit(1);
}

// "#/paths/~1api~1v1~1sites/get/responses" → "GET /api/v1/sites (responses)"
const unescape = (segment) => decodeURIComponent(segment).replace(/~1/g, "/").replace(/~0/g, "~");
function where(pointer = "") {
  const parts = pointer.replace(/^#\/?/, "").split("/").map(unescape);
  if (parts[0] === "paths" && parts.length >= 2) {
    const [, path, method, ...rest] = parts;
    const head = method ? `${method.toUpperCase()} ${path}` : path;
    return rest.length ? `${head} (${rest.join(".")})` : head;
  }
  return `#/${parts.join("/")}`;
}

const problems = report.problems ?? [];
const line = (p) => `${(p.severity === "error" ? "error" : "warning").padEnd(7)} ${p.ruleId.padEnd(28)} ${where(p.location?.[0]?.pointer)}  ${p.message}`;
for (const p of problems.filter((p) => p.severity === "error")) console.log(line(p));
// Warnings: in full with --verbose, otherwise up to 5 per rule.
const byRule = new Map();
for (const p of problems.filter((p) => p.severity !== "error")) byRule.set(p.ruleId, [...(byRule.get(p.ruleId) ?? []), p]);
for (const [rule, list] of byRule) {
  const shown = verbose ? list : list.slice(0, 5);
  for (const p of shown) console.log(line(p));
  if (shown.length < list.length) console.log(`        ${rule}: ${list.length - shown.length} more (npm run lint:openapi -- --verbose)`);
}
// The CLI's own complaints (e.g. about redocly.yaml), without its Node.js version banner.
const notes = (result.stderr ?? "").split("\n").filter((l) => l.trim() && !/[║╔╚═]/.test(l) && !/^validating |validated in|Woohoo|You have \d+ warning|generate-ignore-file|^\s*$/.test(l));
if (notes.length) console.log(notes.join("\n"));

const { errors = 0, warnings = 0, ignored = 0 } = report.totals ?? {};
const paths = Object.keys(document.paths ?? {}).length;
console.log(`\n${relative(ROOT, out)}: OpenAPI ${document.openapi}, ${paths} paths — ${errors} error(s), ${warnings} warning(s)${ignored ? `, ${ignored} ignored` : ""} (redocly ${report.version}, redocly.yaml)`);
if (errors > 0 || (strict && warnings > 0) || result.status !== 0) {
  console.error(errors > 0 ? "OpenAPI lint failed: fix the errors above where the routes are declared (src/)." : `OpenAPI lint failed${strict && warnings > 0 ? " (--strict: warnings count)" : ` (redocly exited ${result.status})`}.`);
  process.exit(1);
}
