// Copies the Swagger UI and ReDoc browser bundles from node_modules into public/vendor, so /docs and
// /redoc render without reaching the internet. Runs on postinstall and again before every build and start
// (npm may skip install scripts), so it is idempotent: a file is rewritten only when it is missing or
// differs from the installed package's copy (e.g. after swagger-ui-dist or redoc changed version).
import { copyFileSync, existsSync, mkdirSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(root, "package.json"));
const out = join(root, "public", "vendor");

const files = [
  ["swagger-ui-dist/swagger-ui-bundle.js", "swagger-ui/swagger-ui-bundle.js"],
  ["swagger-ui-dist/swagger-ui.css", "swagger-ui/swagger-ui.css"],
  ["swagger-ui-dist/favicon-32x32.png", "swagger-ui/favicon-32x32.png"],
  ["redoc/bundles/redoc.standalone.js", "redoc/redoc.standalone.js"],
];

const same = (a, b) => existsSync(b) && statSync(a).size === statSync(b).size && readFileSync(a).equals(readFileSync(b));

for (const [from, to] of files) {
  const source = require.resolve(from);
  const target = join(out, to);
  if (same(source, target)) continue;
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(source, target);
}
