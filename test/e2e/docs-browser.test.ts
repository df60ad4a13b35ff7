// End-to-end in a real browser: Chromium (driven by playwright-core, which downloads no browser) opens
// /docs (Swagger UI) and /redoc (ReDoc) of the BUILT bundle and waits until each has rendered the API
// documentation from /openapi.json. Every request to any other origin is blocked and fails the test, so
// this proves the pages work without internet access.
//
// Needs `npm run build` (npm test and npm run test:e2e do it). The browser is the system's Chromium when
// there is one, else the one inside the @sparticuz/chromium devDependency (test/e2e/chromium.ts), so
// `npm ci && npm test` needs nothing but Node. It never skips itself.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startService, type RunningService } from "../../scripts/lib/serve-bundle.mjs";
import { findChromium } from "./chromium";

const ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
// The browser reaches the service under a name that is not localhost or 127.0.0.1 (mapped to 127.0.0.1
// inside Chromium only), as on a real deployment: Swagger UI, for one, behaves differently on loopback
// hosts (it hides its online validator badge, an image from validator.swagger.io, only there).
const HOST = "fleet-edge.test";

const RENDER_TIMEOUT = 20_000;

let service: RunningService;
let origin: string;
let context: BrowserContext;
let userDataDir: string | undefined;
let operationCount = 0;
/** Every request the current page tried to send anywhere but the service (all of them were aborted). */
const outside: string[] = [];
/** Every Content-Security-Policy violation the current page reported: `directive blocked-uri`. */
const cspViolations: string[] = [];

beforeAll(async () => {
  const browser = await findChromium();
  console.info(`browser test: ${browser.source} Chromium at ${browser.executablePath}`);
  service = await startService({ quiet: true });
  const port = new URL(service.url).port;
  origin = `http://${HOST}:${port}`;

  const document = (await (await fetch(`${service.url}/openapi.json`)).json()) as { paths: Record<string, Record<string, unknown>> };
  for (const item of Object.values(document.paths)) {
    for (const method of Object.keys(item)) if (["get", "put", "post", "delete", "patch", "head", "options", "trace"].includes(method)) operationCount++;
  }

  userDataDir = mkdtempSync(join(tmpdir(), "fleet-edge-chromium-"));
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: browser.executablePath,
    env: { ...process.env, ...browser.env },
    headless: true,
    args: [...ARGS, `--host-resolver-rules=MAP ${HOST} 127.0.0.1`],
    viewport: { width: 1280, height: 900 },
    serviceWorkers: "block",
  });
  // The browser reports each resource, inline script or style, eval or worker its CSP refused as a
  // `securitypolicyviolation` event; the page hands every one to the test before any of its own code runs.
  await context.exposeFunction("reportCspViolation", (violation: string) => cspViolations.push(violation));
  // (A string: this file is type-checked without the DOM library.)
  await context.addInitScript({
    content: `document.addEventListener("securitypolicyviolation", (event) =>
      window.reportCspViolation(event.effectiveDirective + " " + event.blockedURI));`,
  });
  await context.route("**/*", (route) => {
    const url = route.request().url();
    if (new URL(url).origin === origin) return route.continue();
    outside.push(`${route.request().method()} ${url}`);
    return route.abort("blockedbyclient");
  });
});

afterAll(async () => {
  await context?.close();
  await service?.stop();
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
});

/** Opens `path` in a new tab and records page errors and failed or erroring requests to the service. */
async function open(path: string) {
  outside.length = 0;
  cspViolations.length = 0;
  const page = await context.newPage();
  const pageErrors: string[] = [];
  const failed: string[] = [];
  page.on("pageerror", (error) => pageErrors.push(String(error?.stack ?? error)));
  // Console errors count too (e.g. "Failed to load resource" for a subresource). The browser's console
  // line for a CSP refusal is left to the violation events, which the test compares exactly.
  page.on("console", (message) => {
    if (message.type() !== "error") return;
    const text = message.text();
    if (/violates the following Content Security Policy directive/.test(text)) return;
    // The test serves plain HTTP under a name that is not localhost, where Chrome ignores (and says so)
    // the Cross-Origin-Opener-Policy header; it applies over HTTPS, as deployed.
    if (/The Cross-Origin-Opener-Policy header has been ignored, because the URL's origin was untrustworthy/.test(text)) return;
    failed.push(`console error: ${text} (${message.location().url})`);
  });
  page.on("requestfailed", (request) => {
    if (new URL(request.url()).origin === origin) failed.push(`${request.method()} ${request.url()}: ${request.failure()?.errorText}`);
  });
  page.on("response", (response) => {
    if (new URL(response.url()).origin === origin && response.status() >= 400) failed.push(`${response.request().method()} ${response.url()}: HTTP ${response.status()}`);
  });
  const response = await page.goto(`${origin}${path}`, { waitUntil: "load" });
  expect(response?.status()).toBe(200);
  // The page is rendered under a strict policy, or the violation check below would prove nothing.
  const policy = Object.fromEntries(
    ((await response!.headerValue("content-security-policy")) ?? "").split(";").map((d) => d.trim().split(/\s+/)).map(([k, ...v]) => [k, v]),
  );
  expect(policy["default-src"]).toEqual(["'none'"]);
  expect(policy["script-src"]).toEqual(["'self'"]);
  expect(policy["frame-ancestors"]).toEqual(["'none'"]);
  return { page, pageErrors, failed };
}

// Page scripts as strings: this project's TypeScript has no DOM types.
const nextFrame = (page: Page) => page.evaluate("new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)))");
const scrollToTop = (page: Page) => page.evaluate("window.scrollTo(0, 0)");
/** Scrolls most of a screen down; false once the page cannot scroll further. */
const scrollDown = (page: Page) =>
  page.evaluate<boolean>("(() => { const before = window.scrollY; window.scrollBy(0, Math.floor(window.innerHeight * 0.8)); return window.scrollY !== before; })()");

/**
 * The operations Swagger UI drew. From 150 tags and operations on it renders the list virtually
 * (only what is on screen), so this scrolls through the whole page collecting each operation it
 * drew, and returns to the top.
 */
async function renderedOperations(page: Page): Promise<number> {
  const seen = new Set<string>();
  await scrollToTop(page);
  do {
    await nextFrame(page);
    for (const id of await page.locator(".opblock").evaluateAll((blocks) => blocks.map((b) => b.id))) seen.add(id);
  } while (await scrollDown(page));
  await scrollToTop(page);
  await nextFrame(page);
  return seen.size;
}

/**
 * The one violation a page may show: ReDoc's "by Redocly" logo, an image it always requests from
 * cdn.redoc.ly, which the policy refuses on purpose (ReDoc then hides it).
 */
const REDOC_LOGO_REFUSED = "img-src https://cdn.redoc.ly/redoc/logo-mini.svg";

async function finish(
  name: string,
  { page, pageErrors, failed }: { page: Page; pageErrors: string[]; failed: string[] },
  expectedViolations: string[] = [],
) {
  // Let late requests (images, lazily loaded parts) finish before judging.
  await page.waitForLoadState("networkidle");
  await page.screenshot({ path: join(tmpdir(), `fleet-edge-${name}.png`) });
  await page.close();
  expect(pageErrors, "uncaught errors in the page").toEqual([]);
  expect(failed, "failed requests to the service or console errors").toEqual([]);
  expect(outside, "requests to other origins (the page must work offline)").toEqual([]);
  expect([...new Set(cspViolations)], "Content-Security-Policy violations").toEqual(expectedViolations);
}

describe("API documentation in a real browser, offline", () => {
  it("/docs: Swagger UI renders every operation of /openapi.json", async () => {
    const opened = await open("/docs");
    const { page } = opened;

    await page.locator(".opblock").first().waitFor({ timeout: RENDER_TIMEOUT });
    await expect.poll(() => renderedOperations(page), { timeout: RENDER_TIMEOUT }).toBe(operationCount);
    await expect(page.locator(".information-container .title").textContent()).resolves.toContain("Fleet Edge API");

    const signup = page.locator(".opblock.opblock-post", { has: page.locator('.opblock-summary-path[data-path="/api/v1/auth/signup"]') });
    // Drawn only once it is on screen: scroll until it is.
    await scrollToTop(page);
    while ((await signup.count()) === 0 && (await scrollDown(page))) await nextFrame(page);
    await expect(signup.count()).resolves.toBe(1);
    await signup.scrollIntoViewIfNeeded();
    await expect(signup.locator(".opblock-summary-method").textContent()).resolves.toBe("POST");
    await expect(signup.locator(".opblock-summary-description").textContent()).resolves.toBe("Create an account");

    await page.screenshot({ path: join(tmpdir(), "fleet-edge-swagger-ui-top.png") });

    // The UI works, not just draws: expanding the operation shows its request body schema.
    await signup.locator(".opblock-summary").first().click();
    await signup.locator(".opblock-body .body-param, .opblock-body .opblock-section-request-body").first().waitFor({ timeout: RENDER_TIMEOUT });

    // Authorizing keeps the token in the page only: nothing lands in localStorage, where it would outlive
    // the tab and be readable by any script of the origin (Swagger UI's persistAuthorization does that).
    await page.locator(".auth-wrapper button.authorize").click();
    const bearer = page.locator(".auth-container", { hasText: "bearerAuth" });
    await bearer.locator("input").fill("a-bearer-token-from-login");
    await bearer.locator("button.authorize").click();
    await bearer.locator("h6", { hasText: "Authorized" }).waitFor({ timeout: RENDER_TIMEOUT });
    await expect(page.evaluate("Object.keys(localStorage)")).resolves.toEqual([]);
    await expect(page.evaluate("Object.keys(sessionStorage)")).resolves.toEqual([]);

    await finish("swagger-ui", opened);
  });

  it("/redoc: ReDoc renders the API title and its operations", async () => {
    const opened = await open("/redoc");
    const { page } = opened;

    const title = page.locator(".api-info h1");
    await title.waitFor({ timeout: RENDER_TIMEOUT });
    await expect(title.textContent()).resolves.toContain("Fleet Edge API");

    const signup = page.locator('[data-section-id="operation/post_api_v1_auth_signup"]');
    await signup.waitFor({ timeout: RENDER_TIMEOUT });
    await expect(signup.locator("h2").first().innerText()).resolves.toBe("Create an account");
    await expect(signup.textContent()).resolves.toContain("/api/v1/auth/signup");
    await expect.poll(() => page.locator('[data-section-id^="operation/"]').count(), { timeout: RENDER_TIMEOUT }).toBe(operationCount);

    await finish("redoc", opened, [REDOC_LOGO_REFUSED]);
  });
});
