// npm run emulate -- --site S --devices N [--url U] [--bootstrap-key K | --email E --password P] [--duration S] [--mode http|channel]
// Emulated terminals against a running service; docs/emulator.md describes every flag.
import { loadEmulator } from "./lib/emulator.mjs";

const { main } = await loadEmulator();
const { code } = await main(process.argv.slice(2));
process.exit(code);
