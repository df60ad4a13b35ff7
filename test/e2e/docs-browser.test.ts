// End-to-end in a real browser: Debian's Chromium (/usr/bin/chromium, driven by playwright-core, which
// downloads no browser) opens /docs (Swagger UI) and /redoc (ReDoc) of the BUILT bundle and waits until
// each has rendered the API documentation from /openapi.json. Every request to any other origin is
// blocked and fails the test, so this proves the pages work without internet access.
//
// Needs `npm run build` (npm test and npm run test:e2e do it) and the `chromium` Debian package
// (.ci/run installs it). Without Chromium the file FAILS with a message saying so; it never skips itself.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startService, type RunningService } from "../../scripts/lib/serve-bundle.mjs";

const CHROMIUM = "/usr/bin/chromium";
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

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `Chromium is missing: ${CHROMIUM} does not exist. Install Debian's package: \`apt-get install -y chromium\` ` +
        "(.ci/run does). The browser tests never download a browser of their own.",
    );
  }
  service = await startService({ quiet: true });
  const port = new URL(service.url).port;
  origin = `http://${HOST}:${port}`;

  const document = (await (await fetch(`${service.url}/openapi.json`)).json()) as { paths: Record<string, Record<string, unknown>> };
  for (const item of Object.values(document.paths)) {
    for (const method of Object.keys(item)) if (["get", "put", "post", "delete", "patch", "head", "options", "trace"].includes(method)) operationCount++;
  }

  userDataDir = mkdtempSync(join(tmpdir(), "fleet-edge-chromium-"));
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: [...ARGS, `--host-resolver-rules=MAP ${HOST} 127.0.0.1`],
    viewport: { width: 1280, height: 900 },
    serviceWorkers: "block",
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
  const page = await context.newPage();
  const pageErrors: string[] = [];
  const failed: string[] = [];
  page.on("pageerror", (error) => pageErrors.push(String(error?.stack ?? error)));
  // Console errors count too (e.g. "Failed to load resource" for a subresource), except the browser's own
  // refusal of an outside resource by the page's Content-Security-Policy: that request never leaves it.
  page.on("console", (message) => {
    if (message.type() !== "error") return;
    const text = message.text();
    if (/violates the following Content Security Policy directive/.test(text) && !text.includes(`'${origin}`)) return;
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

async function finish(name: string, { page, pageErrors, failed }: { page: Page; pageErrors: string[]; failed: string[] }) {
  // Let late requests (images, lazily loaded parts) finish before judging.
  await page.waitForLoadState("networkidle");
  await page.screenshot({ path: join(tmpdir(), `fleet-edge-${name}.png`) });
  await page.close();
  expect(pageErrors, "uncaught errors in the page").toEqual([]);
  expect(failed, "failed requests to the service or console errors").toEqual([]);
  expect(outside, "requests to other origins (the page must work offline)").toEqual([]);
}

describe("API documentation in a real browser, offline", () => {
  it("/docs: Swagger UI renders every operation of /openapi.json", async () => {
    const opened = await open("/docs");
    const { page } = opened;

    await page.locator(".opblock").first().waitFor({ timeout: RENDER_TIMEOUT });
    await expect.poll(() => renderedOperations(page), { timeout: RENDER_TIMEOUT }).toBe(operationCount);
    await expect(page.locator(".information-container .title").textContent()).resolves.toContain("Fleet Edge API");

    const signup = page.locator(".opblock.opblock-post", { has: page.locator('.opblock-summary-path[data-path="/api/v1/auth/signup"]') });
    await expect(signup.count()).resolves.toBe(1);
    await expect(signup.locator(".opblock-summary-method").textContent()).resolves.toBe("POST");
    await expect(signup.locator(".opblock-summary-description").textContent()).resolves.toBe("Create an account");

    await page.screenshot({ path: join(tmpdir(), "fleet-edge-swagger-ui-top.png") });

    // The UI works, not just draws: expanding the operation shows its request body schema.
    await signup.locator(".opblock-summary").first().click();
    await signup.locator(".opblock-body .body-param, .opblock-body .opblock-section-request-body").first().waitFor({ timeout: RENDER_TIMEOUT });

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

    await finish("redoc", opened);
  });
});
