import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";
import { fileURLToPath } from "node:url";

const migrations = await readD1Migrations(fileURLToPath(new URL("./migrations", import.meta.url)));

export default defineConfig({
  test: {
    // The stall reporter prints nothing unless no test has finished for 3 minutes; then it names what still runs.
    reporters: ["default", "./test/stall-reporter.ts"],
    projects: [
      {
        plugins: [
          cloudflareTest({
            wrangler: { configPath: "./wrangler.toml" },
            miniflare: {
              bindings: {
                JWT_SECRET: "test-secret-that-is-long-enough-for-hs256-0123456789",
                // Live-channel caps small enough for tests to reach (the defaults are 10 and 1000),
                // and one allowed cross-origin page for the cookie Origin check.
                LIVE_MAX_SUBSCRIPTIONS_PER_USER: "3",
                LIVE_MAX_SUBSCRIPTIONS_PER_SITE: "5",
                CORS_ORIGINS: "https://console.example.com",
                // A test key for encrypted audit archives (base64 of 32 bytes); tests remove it to see the refusal.
                AUDIT_ARCHIVE_KEY: "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=",
                TEST_MIGRATIONS: migrations,
              },
            },
          }),
        ],
        test: {
          name: "workers",
          include: ["test/workers/**/*.test.ts"],
          // bcrypt (cost 10) is ~200 ms per hash in bcryptjs; a few tests do dozens.
          testTimeout: 30_000,
          setupFiles: ["./test/workers/apply-migrations.ts"],
        },
      },
      {
        test: {
          name: "e2e",
          include: ["test/e2e/**/*.test.ts"],
          environment: "node",
          testTimeout: 60_000,
          hookTimeout: 120_000,
        },
      },
    ],
  },
});
