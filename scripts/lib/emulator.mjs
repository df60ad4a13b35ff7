// The device emulator is TypeScript (emulator/, typechecked by `npm run typecheck`); Node 20 cannot
// run TypeScript, so this bundles it with esbuild into dist/emulator/ (well under a second), imports
// the bundle and removes the file. Every run bundles afresh, so it always runs the current source, and
// each process has its own file, so runs side by side (the demo and a test) do not race.
import { build } from "esbuild";
import { rm } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

// Not imported from serve-bundle.mjs: that loads Miniflare, whose Ctrl-C handler exits the process
// before the emulator can stop its fleet and print its summary.
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

export async function loadEmulator() {
  const outfile = join(ROOT, "dist", "emulator", `emulator-${process.pid}-${Date.now()}.mjs`);
  await build({
    entryPoints: [join(ROOT, "emulator", "index.ts")],
    outfile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    logLevel: "warning",
  });
  try {
    return await import(pathToFileURL(outfile).href);
  } finally {
    await rm(outfile, { force: true });
  }
}
