// `npm run demo [-- --devices N] [--simulated M] [--url U]`: a fleet working within a minute.
//   1. uses the service at --url (default http://127.0.0.1:8787) when it answers, else starts it
//      with `npm start` (scripts/start.mjs: local D1, wrangler dev, the minute cron);
//   2. creates (or resets the password of) the demo administrator in the local database
//      (scripts/create-admin.mjs) and logs in;
//   3. creates the demo tenant and its two sites (kept when they exist), M simulated devices on the
//      second site and a bootstrap key for the first;
//   4. prints the dashboard URL and the login, then runs N emulated devices on the first site
//      (npm run emulate) until Ctrl-C, which also stops a service the demo started.
// docs/emulator.md describes the demo and the emulator.
import { spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { loadEmulator } from "./lib/emulator.mjs";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: { url: { type: "string" }, devices: { type: "string" }, simulated: { type: "string" }, help: { type: "boolean" } },
});
if (values.help) {
  console.log("npm run demo [-- --devices N (default 20)] [--simulated M (default 3)] [--url URL (default http://127.0.0.1:8787)]");
  process.exit(0);
}
const base = (values.url ?? "http://127.0.0.1:8787").replace(/\/$/, "");
const devices = Number(values.devices ?? 20);
const simulated = Number(values.simulated ?? 3);
if (!Number.isInteger(devices) || devices < 1 || !Number.isInteger(simulated) || simulated < 0) {
  console.error("--devices is a whole number ≥ 1 and --simulated one ≥ 0");
  process.exit(2);
}
const ADMIN_EMAIL = "admin@demo.fleet-edge.local";
const TENANT = { tenant_id: "demo", name: "Demo retail group" };
const SITES = [
  { site_id: "DEMO-NORTH", name: "Demo store North", location: "North street 1", tenant_id: TENANT.tenant_id },
  { site_id: "DEMO-SOUTH", name: "Demo store South", location: "South street 2", tenant_id: TENANT.tenant_id },
];

const up = async () => {
  try {
    return (await fetch(`${base}/health`, { signal: AbortSignal.timeout(2000) })).ok;
  } catch {
    return false;
  }
};

// ---- 1. the service -----------------------------------------------------------------------------
let service;
let stopping = false;
let emulating = false;
// Ctrl-C: while the emulator runs it stops the fleet itself (and then the demo stops the service); before, stop here.
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    stopping = true;
    if (!emulating) shutdown(130);
  });
}
if (await up()) {
  console.log(`▶ Using the service already running at ${base}`);
} else {
  const local = new URL(base);
  if (!["127.0.0.1", "localhost"].includes(local.hostname)) {
    console.error(`Nothing answers at ${base}; the demo starts a service only on this machine (127.0.0.1).`);
    process.exit(1);
  }
  console.log(`▶ Starting the service (npm start) on ${base}…`);
  service = spawn(process.execPath, [join(ROOT, "scripts", "start.mjs")], {
    cwd: ROOT, stdio: ["ignore", "ignore", "inherit"], env: { ...process.env, HOST: local.hostname, PORT: local.port || "8787" },
  });
  service.on("exit", (code) => {
    if (!stopping) {
      console.error(`✖ the service stopped (exit ${code})`);
      process.exit(1);
    }
  });
  const deadline = Date.now() + 180_000;
  while (!(await up())) {
    if (Date.now() > deadline) {
      console.error("✖ the service did not answer within 3 minutes");
      service.kill("SIGINT");
      process.exit(1);
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

// ---- 2. the administrator -----------------------------------------------------------------------
const password = `demo-${randomBytes(6).toString("base64url")}`;
console.log(`▶ Creating the demo administrator ${ADMIN_EMAIL}`);
const created = spawnSync(process.execPath, [join(ROOT, "scripts", "create-admin.mjs"), "--email", ADMIN_EMAIL, "--reset-password", "--full-name", "Demo administrator"], {
  cwd: ROOT, stdio: ["ignore", "ignore", "inherit"], env: { ...process.env, ADMIN_PASSWORD: password },
});
if (created.status !== 0) {
  console.error("✖ could not create the administrator (npm run create-admin works on the local database only)");
  await shutdown(1);
}

async function api(path, { method = "GET", token, body, allow = [] } = {}) {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok && !allow.includes(response.status)) throw new Error(`${method} ${path} → ${response.status} ${text}`);
  return { status: response.status, json: text ? JSON.parse(text) : undefined };
}

// ---- 3. tenant, sites, devices ------------------------------------------------------------------
let bootstrapKey;
try {
  const login = await api("/api/v1/auth/login", { method: "POST", body: { email: ADMIN_EMAIL, password } });
  const token = login.json.data.access_token;
  await api("/api/v1/tenants", { method: "POST", token, body: TENANT, allow: [409] });
  for (const site of SITES) await api("/api/v1/sites/sites", { method: "POST", token, body: site, allow: [409] });
  for (let i = 1; i <= simulated; i++) {
    await api(`/api/v1/devices/sites/${SITES[1].site_id}/devices`, {
      method: "POST", token, allow: [409],
      body: { device_id: `DEMO-SIM-${i}`, name: `Simulated till ${i}`, device_type: i % 3 === 0 ? "kiosk" : "pos_terminal", device_source: "simulated" },
    });
  }
  bootstrapKey = (await api(`/api/v1/sites/${SITES[0].site_id}/bootstrap-key`, { method: "POST", token })).json.bootstrap_key;
} catch (error) {
  console.error(`✖ ${error.message}`);
  await shutdown(1);
}

console.log(`
✔ Demo ready
    Dashboard   ${base}/dashboard
    Log in as   ${ADMIN_EMAIL}
    Password    ${password}
    Tenant      ${TENANT.name} (${TENANT.tenant_id}): ${SITES.map((s) => s.site_id).join(", ")}
    Devices     ${devices} emulated on ${SITES[0].site_id}, ${simulated} simulated on ${SITES[1].site_id}
    API docs    ${base}/docs
  Ctrl-C stops the emulator${service ? " and the service" : ""}.
`);

// ---- 4. the emulator until Ctrl-C ---------------------------------------------------------------
const { main } = await loadEmulator();
emulating = true;
const { code } = await main(["--url", base, "--site", SITES[0].site_id, "--devices", String(devices), "--bootstrap-key", bootstrapKey]);
await shutdown(code);

async function shutdown(code) {
  stopping = true;
  if (service && service.exitCode === null) {
    service.kill("SIGINT");
    await new Promise((resolve) => service.once("exit", resolve));
  }
  process.exit(code);
}
