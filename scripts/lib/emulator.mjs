// The device emulator is TypeScript (emulator/, typechecked by `npm run typecheck`); Node 20 cannot
// run TypeScript, so this bundles it with esbuild into dist/emulator/ (well under a second) and
// imports the bundle. Every run bundles afresh, so it always runs the current source.
import { build } from "esbuild";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { ROOT } from "./serve-bundle.mjs";

export async function loadEmulator() {
  const outfile = join(ROOT, "dist", "emulator", "emulator.mjs");
  await build({
    entryPoints: [join(ROOT, "emulator", "index.ts")],
    outfile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    logLevel: "warning",
  });
  return import(`${pathToFileURL(outfile).href}?t=${Date.now()}`);
}
