// The device emulator is TypeScript (emulator/, typechecked by `npm run typecheck`); Node 20 cannot
// run TypeScript, so this bundles it with esbuild into dist/emulator/ (well under a second) and
// imports the bundle. Every run bundles afresh, so it always runs the current source.
import { build } from "esbuild";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

// Not imported from serve-bundle.mjs: that loads Miniflare, whose Ctrl-C handler exits the process
// before the emulator can stop its fleet and print its summary.
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

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
