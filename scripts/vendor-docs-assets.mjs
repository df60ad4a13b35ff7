// Copies the Swagger UI and ReDoc browser bundles from node_modules into public/vendor, so /docs and
// /redoc render without reaching the internet. Runs before every build, start and test.
import { copyFileSync, mkdirSync, existsSync } from "node:fs";
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

for (const [from, to] of files) {
  const source = require.resolve(from);
  const target = join(out, to);
  mkdirSync(dirname(target), { recursive: true });
  if (!existsSync(target)) copyFileSync(source, target);
}
