// Builds the operator dashboard (dashboard/) into public/dashboard/, which the Worker serves as static
// assets at /dashboard (docs/dashboard.md). Runs on postinstall, before every build and before `npm start`,
// so a fresh clone shows the dashboard after `npm ci && npm start`. The output is git-ignored.
//
// One ES module bundle (no inline script, so the page runs under a strict Content-Security-Policy), the
// stylesheet and the HTML shell, copied as they are.
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const source = join(root, "dashboard");
const out = join(root, "public", "dashboard");

mkdirSync(out, { recursive: true });
await build({
  entryPoints: [join(source, "src", "main.ts")],
  outfile: join(out, "app.js"),
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: true,
  sourcemap: "linked",
  legalComments: "none",
  logLevel: "warning",
});
for (const file of ["index.html", "dashboard.css"]) copyFileSync(join(source, file), join(out, file));
