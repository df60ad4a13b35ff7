// Part of `npm run build`, after the Worker is bundled: serves dist/ (workerd through Miniflare),
// reads the OpenAPI document the Worker publishes at /openapi.json and writes its TypeScript types
// to emulator/api.d.ts with openapi-typescript. The emulator's client (emulator/client.ts) is typed by
// that file, so a contract change that breaks the emulator fails `npm run typecheck`.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import openapiTS from "openapi-typescript";
import { ROOT, startService } from "./lib/serve-bundle.mjs";

const OUT = join(ROOT, "emulator", "api.d.ts");

const service = await startService({ quiet: true, assets: false, migrate: false });
try {
  const response = await fetch(`${service.url}/openapi.json`);
  if (!response.ok) throw new Error(`GET /openapi.json → ${response.status}`);
  const document = await response.json();
  const types = await openapiTS(document, { exportType: false });
  const previous = (() => { try { return readFileSync(OUT, "utf8"); } catch { return undefined; } })();
  if (previous !== types) {
    writeFileSync(OUT, types);
    console.log("emulator/api.d.ts: regenerated from /openapi.json");
  }
} finally {
  await service.stop();
}
