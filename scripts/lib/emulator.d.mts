/** Bundles emulator/ with esbuild and imports it (see emulator.mjs). */
export function loadEmulator(): Promise<typeof import("../../emulator/index")>;
