// End-to-end in a real browser: the operator dashboard (/dashboard) of the BUILT bundle, in Chromium
// driven by playwright-core, against real HTTP. The test plays the device itself over HTTP (heartbeat,
// command poll, ack, report) and the operator in the browser: sign in, watch the device come online
// and go offline in the site's grid, queue a restart that reaches the device's poll, create a job and
// watch its execution complete; then a viewer, who is offered no write action. Every request must stay
// on the service, nothing may log a console error, and each step leaves a 1280×800 screenshot under
// test-artifacts/ (git-ignored).
//
// Needs `npm run build` (npm test and npm run test:e2e do it). The browser is found as the docs test
// finds it (test/e2e/chromium.ts).
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT, startService, type RunningService } from "../../scripts/lib/serve-bundle.mjs";
import { findChromium } from "./chromium";

const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const ARTIFACTS = join(ROOT, "test-artifacts");
const UI_TIMEOUT = 15_000;
/** A device is offline after three missed heartbeats, and never sooner than 30 s (durable-objects/presence.ts). */
const OFFLINE_WITHIN_MS = 45_000;

let service: RunningService;
let base: string;
let context: BrowserContext;
let userDataDir: string;
/** Requests the pages tried to send anywhere but the service (aborted). */
const outside: string[] = [];
/** Console errors, uncaught page errors and CSP violations of every page. */
const problems: string[] = [];

const unique = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;

async function call(path: string, init: { method?: string; token?: string; body?: unknown; headers?: Record<string, string> } = {}) {
  const headers: Record<string, string> = { ...init.headers };
  if (init.body !== undefined) headers["content-type"] = "application/json";
  if (init.token) headers.authorization = `Bearer ${init.token}`;
  const res = await fetch(`${base}${path}`, { method: init.method ?? "GET", headers, body: init.body === undefined ? undefined : JSON.stringify(init.body) });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : undefined };
}

const owner = { email: `${unique("owner")}@example.com`, password: "correct-horse-battery" };
const viewer = { email: `${unique("viewer")}@example.com`, password: "correct-horse-staple" };
const siteId = unique("SITE").toUpperCase();
let device: { id: string; headers: Record<string, string> };
let viewerInvitationCode: string;

beforeAll(async () => {
  const browser = await findChromium();
  service = await startService({ quiet: true });
  base = service.url;
  mkdirSync(ARTIFACTS, { recursive: true });

  const signup = await call("/api/v1/auth/signup", { method: "POST", body: owner });
  expect(signup.status).toBe(201);
  const token = signup.json.data.access_token as string;
  expect((await call("/api/v1/sites/sites", { method: "POST", token, body: { site_id: siteId, name: "Harbour Street store" } })).status).toBe(201);
  const registered = await call(`/api/v1/devices/sites/${siteId}/devices`, { method: "POST", token, body: { name: "Till 1", device_type: "pos_terminal" } });
  expect(registered.status).toBe(201);
  device = { id: registered.json.device_id, headers: { "X-Device-ID": registered.json.device_id, "X-API-Key": registered.json.api_key } };
  // The viewer is invited before signing up, and accepts the invitation's code in the dashboard.
  const invited = await call(`/api/v1/sites/${siteId}/members`, { method: "POST", token, body: { email: viewer.email, role: "viewer" } });
  expect(invited.status).toBe(202);
  viewerInvitationCode = invited.json.invitation_code;
  expect((await call("/api/v1/auth/signup", { method: "POST", body: viewer })).status).toBe(201);

  userDataDir = mkdtempSync(join(tmpdir(), "fleet-edge-dashboard-"));
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: browser.executablePath,
    env: { ...process.env, ...browser.env },
    headless: true,
    args: ARGS,
    viewport: { width: 1280, height: 800 },
    serviceWorkers: "block",
  });
  await context.exposeFunction("reportCspViolation", (violation: string) => problems.push(`CSP violation: ${violation}`));
  await context.addInitScript({
    content: `document.addEventListener("securitypolicyviolation", (event) => window.reportCspViolation(event.effectiveDirective + " " + event.blockedURI));`,
  });
  await context.route("**/*", (route) => {
    const url = route.request().url();
    if (new URL(url).origin === base) return route.continue();
    outside.push(`${route.request().method()} ${url}`);
    return route.abort("blockedbyclient");
  });
});

afterAll(async () => {
  await context?.close();
  await service?.stop();
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
});

/** A page whose console errors and uncaught errors are recorded in `problems`. */
async function newPage() {
  const page = await context.newPage();
  page.on("pageerror", (error) => problems.push(`page error: ${error.stack ?? error}`));
  page.on("console", (message) => {
    if (message.type() !== "error") return;
    const where = message.location().url;
    // The one expected refusal: before signing in, the dashboard asks who is signed in and hears 401.
    if (/Failed to load resource: the server responded with a status of 401/.test(message.text()) && where.endsWith("/api/v1/auth/me")) return;
    problems.push(`console error: ${message.text()} (${where})`);
  });
  return page;
}

const shot = (page: Page, name: string) => page.screenshot({ path: join(ARTIFACTS, `dashboard-${name}.png`) });
const row = (page: Page) => page.locator(`.grid tr[data-device="${device.id}"]`);
const statusOf = (page: Page) => row(page).locator("[data-status]").getAttribute("data-status");

async function signIn(page: Page, who: { email: string; password: string }) {
  // Whoever a previous test left signed in (the tests sign out, but one that failed may not have).
  await context.clearCookies();
  const response = await page.goto(`${base}/`);
  // A browser opening / lands on the dashboard, which asks to sign in.
  expect(response?.status()).toBe(200);
  await page.waitForURL(`${base}/dashboard/login`);
  await page.getByLabel("E-mail").fill(who.email);
  await page.getByLabel("Password").fill(who.password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(`${base}/dashboard/sites`);
}

async function openSite(page: Page, live = "live") {
  await page.getByRole("link", { name: "Harbour Street store" }).click();
  await page.waitForURL(`${base}/dashboard/site?site_id=${siteId}`);
  await expect.poll(() => page.locator("#live-state").textContent(), { timeout: UI_TIMEOUT }).toBe(live);
}

/** The device's command poll: leased commands, each acknowledged and reported as `report` says. */
async function poll(report?: "completed") {
  const res = await call("/api/v1/devices/pending", { headers: device.headers });
  expect(res.status).toBe(200);
  const commands = res.json.commands as { command_id: string; command_type: string }[];
  if (report) {
    for (const c of commands) {
      expect((await call(`/api/v1/commands/${c.command_id}/ack`, { method: "POST", headers: device.headers })).status).toBe(200);
      expect((await call(`/api/v1/commands/${c.command_id}/status`, { method: "PUT", headers: device.headers, body: { status: "completed", result: { ok: true } } })).status).toBe(200);
    }
  }
  return commands;
}

describe("the operator dashboard in a real browser", () => {
  it("an operator signs in, watches a device come online and go offline, restarts it and runs a job", async () => {
    const page = await newPage();
    await signIn(page, owner);
    const card = page.locator(`.site-card[data-site="${siteId}"]`);
    await expect.poll(() => card.locator(".counts").textContent(), { timeout: UI_TIMEOUT }).toContain("Devices1");
    await shot(page, "sites");

    await openSite(page);
    expect(await statusOf(page)).not.toBe("online");

    // Online within 2 s of the device's first heartbeat, pushed over the site's WebSocket.
    const beat = () => call("/api/v1/agent/heartbeat", { method: "POST", headers: device.headers, body: { heartbeat_interval_s: 1 } });
    expect((await beat()).json.device_status).toBe("online");
    const sent = Date.now();
    await expect.poll(() => statusOf(page), { timeout: 2_000, interval: 50 }).toBe("online");
    expect(Date.now() - sent).toBeLessThan(2_000);
    // Telemetry: each stored sample arrives as a device.metrics event and extends the row's CPU sparkline.
    for (const cpu of [20, 60, 35]) {
      const sent = await call("/api/v1/agent/telemetry", { method: "POST", headers: device.headers, body: { cpu_usage: cpu, memory_usage: 40, disk_usage: 55 } });
      expect(sent.status).toBe(200);
    }
    await row(page).locator("svg.sparkline polyline").waitFor({ timeout: UI_TIMEOUT });
    await shot(page, "site-online");

    // The device page draws the stored series as a chart.
    await row(page).getByRole("link", { name: "Till 1" }).click();
    await page.waitForURL(`${base}/dashboard/device?device_id=${device.id}`);
    await page.locator("#metrics-chart svg polyline.line-cpu, #metrics-chart svg circle.line-cpu").first().waitFor({ timeout: UI_TIMEOUT });
    await expect.poll(() => page.locator("#health").textContent(), { timeout: UI_TIMEOUT }).toContain("Agent state");
    await shot(page, "device");
    await page.goBack();
    await page.waitForURL(`${base}/dashboard/site?site_id=${siteId}`);
    await expect.poll(() => page.locator("#live-state").textContent(), { timeout: UI_TIMEOUT }).toBe("live");

    // A restart queued from the grid, after confirming, reaches the device's poll.
    await row(page).getByRole("button", { name: /Restart/ }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Restart" }).click();
    await expect.poll(() => page.locator("#status-line").textContent(), { timeout: UI_TIMEOUT }).toContain("Restart queued");
    const delivered = await poll("completed");
    expect(delivered.map((c) => c.command_type)).toEqual(["restart"]);

    // A job created in the UI: its execution completes once the device runs it.
    await page.getByLabel("Action").selectOption("ping");
    await page.getByLabel("Description").fill("Check the tills answer");
    await page.getByRole("button", { name: "Create job" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Create job" }).click();
    await page.locator("#job-list a", { hasText: "ping" }).click();
    await page.waitForURL(/\/dashboard\/job\?job_id=/);
    await expect.poll(async () => (await poll("completed")).map((c) => c.command_type), { timeout: UI_TIMEOUT, interval: 250 }).toEqual(["ping"]);
    await expect.poll(() => page.locator(`#executions tr[data-device="${device.id}"] [data-status]`).getAttribute("data-status"), { timeout: UI_TIMEOUT }).toBe("completed");
    await expect.poll(() => page.locator("#job-summary [data-status]").getAttribute("data-status"), { timeout: UI_TIMEOUT }).toBe("completed");
    await shot(page, "job-completed");

    // Enrolment: an intent's claim token is shown once, then the intent is revoked.
    await page.getByRole("link", { name: siteId }).click();
    await page.getByRole("link", { name: /^Enrolment/ }).click();
    await page.getByLabel("Expected device identity (optional)").fill("SN-0042");
    await page.getByRole("button", { name: "Create intent" }).click();
    await expect.poll(() => page.locator("#shown-once code").textContent(), { timeout: UI_TIMEOUT }).toMatch(/\S{16,}/);
    const intent = page.locator("#intents tr[data-intent]");
    await expect.poll(() => intent.count(), { timeout: UI_TIMEOUT }).toBe(1);
    await intent.getByRole("button", { name: "Revoke" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Revoke" }).click();
    await expect.poll(() => intent.locator(".status").textContent(), { timeout: UI_TIMEOUT }).toBe("revoked");
    await shot(page, "enrolment");
    await page.reload();
    await expect.poll(() => intent.count(), { timeout: UI_TIMEOUT }).toBe(1);
    expect(await page.locator("#shown-once").isHidden()).toBe(true);

    // Members: the owner is listed; inviting an address shows its code once. The audit trail lists the sign-in.
    await page.getByRole("link", { name: siteId }).click();
    await page.getByRole("link", { name: "Members and roles" }).click();
    await expect.poll(() => page.locator("#members tr").count(), { timeout: UI_TIMEOUT }).toBe(1);
    await page.locator("#invite-email").fill(`${unique("cashier")}@example.com`);
    await page.getByRole("button", { name: "Invite" }).click();
    await expect.poll(() => page.locator("#invitation-code code").textContent(), { timeout: UI_TIMEOUT }).toMatch(/^inv_[\w-]{43}$/);
    await expect(page.locator("#members tr").count()).resolves.toBe(1);
    await page.getByRole("link", { name: "Audit" }).click();
    await page.getByLabel("Event type").fill("login_success");
    await page.getByRole("button", { name: "Apply" }).click();
    await expect.poll(() => page.locator("#audit-events").textContent(), { timeout: UI_TIMEOUT }).toContain("login_success");
    await shot(page, "audit");

    // The device stops calling: the grid shows it offline once presence gives up on it.
    await page.getByRole("link", { name: "Sites" }).click();
    await page.getByRole("link", { name: "Harbour Street store" }).click();
    await expect.poll(() => page.locator("#live-state").textContent(), { timeout: UI_TIMEOUT }).toBe("live");
    await expect.poll(() => statusOf(page), { timeout: OFFLINE_WITHIN_MS, interval: 250 }).toBe("offline");
    await shot(page, "site-offline");

    await page.getByRole("button", { name: "Sign out" }).click();
    await page.waitForURL(`${base}/dashboard/login`);
    await page.close();
  }, 120_000);

  it("a viewer accepts an invitation's code, sees the site and is offered no write action", async () => {
    const page = await newPage();
    await signIn(page, viewer);
    // Not a member until the invitation's code is accepted.
    await page.getByText("No sites yet").waitFor({ timeout: UI_TIMEOUT });
    await page.getByLabel("Invitation code").fill(viewerInvitationCode);
    await page.getByRole("button", { name: "Accept" }).click();
    await page.waitForURL(`${base}/dashboard/site?site_id=${siteId}`);
    await expect.poll(() => page.locator("#live-state").textContent(), { timeout: UI_TIMEOUT }).toBe("live");
    await expect(page.locator("p.muted", { hasText: "your role: viewer" }).count()).resolves.toBe(1);
    await expect(row(page).count()).resolves.toBe(1);
    await expect(page.getByRole("button", { name: /Restart/ }).count()).resolves.toBe(0);
    await expect(page.getByRole("button", { name: "Create job" }).count()).resolves.toBe(0);
    await shot(page, "viewer-site");

    await row(page).getByRole("link", { name: "Till 1" }).click();
    await page.waitForURL(`${base}/dashboard/device?device_id=${device.id}`);
    await page.getByText("Your role on this site is viewer").waitFor({ timeout: UI_TIMEOUT });
    for (const name of ["Restart", "Suspend", "Resume", "Rotate key", "Queue command", "Push config"]) {
      await expect(page.getByRole("button", { name }).count(), name).resolves.toBe(0);
    }
    // The commands the operator sent are there to read.
    await expect.poll(() => page.locator("#commands tr").count(), { timeout: UI_TIMEOUT }).toBe(2);
    await shot(page, "viewer-device");
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.waitForURL(`${base}/dashboard/login`);
    await page.close();
  }, 60_000);

  it("reconnects a dropped WebSocket with a new ticket and replays what it missed", async () => {
    const page = await newPage();
    const opened: string[] = [];
    let dropFirst: (() => void) | undefined;
    // How many connections the page had opened when the test dropped the latest one.
    let droppedAt: number | undefined;
    // The page's WebSocket goes through the test: the first connection is dropped once the page is live
    // and has drawn the device, and the device changes state before the second one reaches the
    // service, so only a replay can show it. The test decides when to drop, not a timer, so a slow
    // machine cannot let the reconnect race the first reading.
    await page.routeWebSocket(/\/api\/v1\/sites\/[^/]+\/ws\?/, async (ws) => {
      opened.push(ws.url());
      if (droppedAt !== undefined && opened.length === droppedAt + 1) {
        const beat = await call("/api/v1/agent/heartbeat", { method: "POST", headers: device.headers, body: { status: "error" } });
        expect(beat.json.device_status).toBe("error");
      }
      ws.connectToServer();
      const index = opened.length;
      dropFirst = () => { droppedAt = index; void ws.close({ code: 1011, reason: "test drops the connection" }); };
    });
    await signIn(page, owner);
    await openSite(page);
    expect(await statusOf(page)).toBe("offline");
    expect(dropFirst, "the page's first live connection").toBeDefined();
    dropFirst!();
    await expect.poll(() => opened.length, { timeout: UI_TIMEOUT }).toBe(droppedAt! + 1);
    await expect.poll(() => statusOf(page), { timeout: 5_000, interval: 100 }).toBe("error");
    // The connection the test dropped, and the one the page opened after it.
    const [first, second] = opened.slice(droppedAt! - 1).map((url) => new URL(url).searchParams);
    // Each connection starts where the page's knowledge ends: the first at the position taken before the
    // page read the devices, the second at the last event the first delivered (or that same position).
    expect(Number(first.get("since"))).toBeGreaterThan(0);
    expect(Number(second.get("since"))).toBeGreaterThanOrEqual(Number(first.get("since")));
    expect(second.get("ticket")).not.toBe(first.get("ticket"));
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.waitForURL(`${base}/dashboard/login`);
    await page.close();
  }, 60_000);

  it("follows the site over server-sent events where WebSockets are unavailable", async () => {
    const page = await newPage();
    // As behind a proxy that refuses WebSocket upgrades: the page has no WebSocket at all.
    await page.addInitScript({ content: "delete window.WebSocket;" });
    await signIn(page, owner);
    await openSite(page, "live (events)");
    expect(await statusOf(page)).toBe("error");
    expect((await call("/api/v1/agent/heartbeat", { method: "POST", headers: device.headers, body: {} })).json.device_status).toBe("online");
    await expect.poll(() => statusOf(page), { timeout: 2_000, interval: 50 }).toBe("online");
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.waitForURL(`${base}/dashboard/login`);
    await page.close();
  }, 60_000);

  it("an operator queues a command, pushes a configuration, suspends and resumes a device and rotates its key", async () => {
    const page = await newPage();
    await signIn(page, owner);
    await page.goto(`${base}/dashboard/device?device_id=${device.id}`);
    await page.getByRole("heading", { name: "Actions" }).waitFor({ timeout: UI_TIMEOUT });
    const commandTypes = () => page.locator("#commands tr[data-command] td:first-child").allTextContents();

    await page.getByLabel("Command type").fill("ping");
    await page.getByLabel("Payload (JSON object, optional)").fill('{"count": 3}');
    await page.getByRole("button", { name: "Queue command" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Queue" }).click();
    await expect.poll(commandTypes, { timeout: UI_TIMEOUT }).toContain("ping");

    await page.getByLabel("Configuration URL").fill("https://config.example.com/pos/2026-11.json");
    await page.getByRole("button", { name: "Push config" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Push config" }).click();
    await expect.poll(commandTypes, { timeout: UI_TIMEOUT }).toContain("update_config");
    const leased = await poll("completed");
    expect(leased.map((c) => c.command_type).sort()).toEqual(["ping", "update_config"]);

    const lifecycle = () => page.locator('[data-fact="Lifecycle"]').textContent();
    await page.getByRole("button", { name: "Suspend" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Suspend" }).click();
    await expect.poll(lifecycle, { timeout: UI_TIMEOUT }).toBe("suspended");
    expect((await call("/api/v1/agent/heartbeat", { method: "POST", headers: device.headers, body: {} })).status).toBe(403);
    await page.getByRole("button", { name: "Resume" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Resume" }).click();
    await expect.poll(lifecycle, { timeout: UI_TIMEOUT }).toBe("active");

    // The new key is shown once, and it is the one the device must use from now on.
    await page.getByRole("button", { name: "Rotate key" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Rotate key" }).click();
    const key = await page.locator(".secret code").textContent({ timeout: UI_TIMEOUT });
    expect((await call("/api/v1/agent/heartbeat", { method: "POST", headers: device.headers, body: {} })).status).toBe(401);
    device.headers["X-API-Key"] = key!;
    expect((await call("/api/v1/agent/heartbeat", { method: "POST", headers: device.headers, body: {} })).status).toBe(200);
    await shot(page, "device-actions");
    await page.close();
  }, 60_000);

  it("draws only the rows in view of a 500-device site, and every device is reachable by scrolling or search", async () => {
    const login = await call("/api/v1/auth/login", { method: "POST", body: owner });
    const token = login.json.data.access_token as string;
    const bigSite = unique("BIG").toUpperCase();
    expect((await call("/api/v1/sites/sites", { method: "POST", token, body: { site_id: bigSite, name: "Flagship store" } })).status).toBe(201);
    const ids = Array.from({ length: 500 }, (_, i) => `${bigSite}-T${String(i).padStart(3, "0")}`);
    // Simulated devices: registered without a key (no bcrypt), so 500 take seconds.
    for (let i = 0; i < ids.length; i += 25) {
      const batch = await Promise.all(ids.slice(i, i + 25).map((id, j) => call(`/api/v1/devices/sites/${bigSite}/devices`, {
        method: "POST", token, body: { device_id: id, name: `Till ${i + j}`, device_type: "pos_terminal", device_source: "simulated" },
      })));
      expect(batch.map((r) => r.status)).toEqual(batch.map(() => 201));
    }

    const page = await newPage();
    await signIn(page, owner);
    await page.goto(`${base}/dashboard/site?site_id=${bigSite}`);
    await expect.poll(() => page.locator("#site-counts").textContent(), { timeout: UI_TIMEOUT }).toMatch(/^500 devices/);
    const drawn = () => page.locator(".grid tbody tr[data-device]").count();
    // Each simulated agent's state, read from the agents list.
    await expect.poll(() => page.locator(`.grid tr[data-device="${ids[499]}"] td`).nth(3).textContent(), { timeout: UI_TIMEOUT }).toMatch(/^[a-z_]+$/);
    expect(await drawn()).toBeLessThan(40);

    // Scrolled to the bottom, the last device is drawn, and still only a screenful of rows.
    // Newest first: the first registered device is the last row.
    await page.locator(`.grid tr[data-device="${ids[499]}"]`).waitFor({ timeout: UI_TIMEOUT });
    await page.locator(".grid-scroll").evaluate((el) => { el.scrollTop = el.scrollHeight; });
    await page.locator(`.grid tr[data-device="${ids[0]}"]`).waitFor({ timeout: UI_TIMEOUT });
    await page.locator(`.grid tr[data-device="${ids[499]}"]`).waitFor({ state: "detached", timeout: UI_TIMEOUT });
    const lastRows = await page.locator(".grid tbody tr[data-device]").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-device")));
    expect(lastRows.length).toBeLessThan(40);
    await shot(page, "site-500");

    // Search finds one device among the 500.
    await page.getByLabel("Search devices").fill("Till 250");
    await expect.poll(drawn, { timeout: UI_TIMEOUT }).toBe(1);
    await expect(page.locator(`.grid tr[data-device="${ids[250]}"]`).count()).resolves.toBe(1);
    await page.close();
  }, 120_000);

  it("an operator creates a bootstrap key that enrols a device, and cancels a job", async () => {
    const page = await newPage();
    await signIn(page, owner);
    await page.goto(`${base}/dashboard/enrolment?site_id=${siteId}`);
    await page.getByRole("button", { name: "Create bootstrap key" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Create key" }).click();
    const key = await page.locator("#shown-once code").textContent({ timeout: UI_TIMEOUT });
    const enrolled = await call("/api/v1/devices/bootstrap-provision", { method: "POST", body: { site_id: siteId, device_name: "Till 2", bootstrap_key: key } });
    expect(enrolled.status).toBe(201);

    await page.goto(`${base}/dashboard/site?site_id=${siteId}`);
    await expect.poll(() => page.locator("#live-state").textContent(), { timeout: UI_TIMEOUT }).toBe("live");
    await page.getByLabel("Action").selectOption("restart");
    await page.getByRole("button", { name: "Create job" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Create job" }).click();
    await page.locator("#job-list a", { hasText: "restart" }).first().click();
    await page.waitForURL(/\/dashboard\/job\?job_id=/);
    await page.getByRole("button", { name: "Cancel job" }).click();
    await page.getByRole("dialog").getByRole("button", { name: "Cancel job" }).click();
    await expect.poll(() => page.locator("#job-summary [data-status]").getAttribute("data-status"), { timeout: UI_TIMEOUT }).toBe("cancelled");
    await expect.poll(() => page.getByRole("button", { name: "Cancel job" }).count(), { timeout: UI_TIMEOUT }).toBe(0);
    await shot(page, "job-cancelled");
    await page.close();
  }, 60_000);

  it("the sites overview shows a device coming online without a reload, pushed by the site's live channel", async () => {
    const manager = { email: `${unique("overview")}@example.com`, password: "correct-horse-overview" };
    const token = (await call("/api/v1/auth/signup", { method: "POST", body: manager })).json.data.access_token as string;
    const overviewSite = unique("OVERVIEW").toUpperCase();
    expect((await call("/api/v1/sites/sites", { method: "POST", token, body: { site_id: overviewSite, name: "Overview store" } })).status).toBe(201);
    const till = await call(`/api/v1/devices/sites/${overviewSite}/devices`, { method: "POST", token, body: { name: "Overview till", device_type: "pos_terminal" } });
    const tillHeaders = { "X-Device-ID": till.json.device_id, "X-API-Key": till.json.api_key };

    const page = await newPage();
    await signIn(page, manager);
    const card = page.locator(`.site-card[data-site="${overviewSite}"]`);
    await expect.poll(() => card.getAttribute("data-live"), { timeout: UI_TIMEOUT }).toBe("live");
    await expect.poll(() => card.locator('[data-count="total"]').textContent(), { timeout: UI_TIMEOUT }).toBe("1");
    expect(await card.locator('[data-count="online"]').textContent()).toBe("0");
    // A live card is not re-read on a timer: only the channel's event can bring the change.
    const healthReads: string[] = [];
    page.on("request", (request) => { if (request.url().endsWith(`/api/v1/sites/${overviewSite}/health`)) healthReads.push(request.url()); });

    expect((await call("/api/v1/agent/heartbeat", { method: "POST", headers: tillHeaders, body: { heartbeat_interval_s: 1 } })).json.device_status).toBe("online");
    const sent = Date.now();
    await expect.poll(() => card.locator('[data-count="online"]').textContent(), { timeout: 2_000, interval: 50 }).toBe("1");
    expect(Date.now() - sent).toBeLessThan(2_000);
    expect(healthReads.length).toBeGreaterThanOrEqual(1);
    expect(await card.getAttribute("data-live")).toBe("live");
    await shot(page, "sites-live");
    await page.close();
  });

  it("the sites overview re-reads a site's health every 5 s while its live channel cannot open", async () => {
    const manager = { email: `${unique("fallback")}@example.com`, password: "correct-horse-fallback" };
    const token = (await call("/api/v1/auth/signup", { method: "POST", body: manager })).json.data.access_token as string;
    const fallbackSite = unique("FALLBACK").toUpperCase();
    expect((await call("/api/v1/sites/sites", { method: "POST", token, body: { site_id: fallbackSite, name: "Fallback store" } })).status).toBe(201);
    const till = await call(`/api/v1/devices/sites/${fallbackSite}/devices`, { method: "POST", token, body: { name: "Fallback till", device_type: "pos_terminal" } });

    // This page's live channel never gets a ticket: the refusals it logs are the point, not problems.
    const page = await context.newPage();
    page.on("pageerror", (error) => problems.push(`page error: ${error.stack ?? error}`));
    page.on("console", (message) => {
      if (message.type() !== "error") return;
      const where = message.location().url;
      if (/status of (401|503)/.test(message.text()) && (where.endsWith("/api/v1/auth/me") || where.endsWith("/ws-ticket"))) return;
      problems.push(`console error: ${message.text()} (${where})`);
    });
    await page.route(`**/api/v1/sites/${fallbackSite}/ws-ticket`, (route) => route.fulfill({ status: 503, contentType: "application/json", body: JSON.stringify({ detail: "refused by the test" }) }));
    await signIn(page, manager);
    const card = page.locator(`.site-card[data-site="${fallbackSite}"]`);
    await expect.poll(() => card.getAttribute("data-live"), { timeout: UI_TIMEOUT }).toBe("polling");
    await expect.poll(() => card.locator('[data-count="total"]').textContent(), { timeout: UI_TIMEOUT }).toBe("1");
    expect(await card.locator('[data-count="online"]').textContent()).toBe("0");

    const beat = await call("/api/v1/agent/heartbeat", { method: "POST", headers: { "X-Device-ID": till.json.device_id, "X-API-Key": till.json.api_key }, body: { heartbeat_interval_s: 1 } });
    expect(beat.json.device_status).toBe("online");
    // The next 5 s re-read brings it (plus the read's own time on a loaded machine).
    await expect.poll(() => card.locator('[data-count="online"]').textContent(), { timeout: 8_000, interval: 100 }).toBe("1");
    expect(await card.getAttribute("data-live")).toBe("polling");
    await page.close();
  });

  it("kept every request on the service and logged no error", () => {
    expect(outside, "requests to other origins").toEqual([]);
    expect(problems, "console errors, page errors, CSP violations").toEqual([]);
  });
});
