// What scripts load from the emulator bundle (scripts/lib/emulator.mjs): the command line, and the fleet for scripts that drive it themselves.
export { main, progressLine, summaryOf } from "./cli";
export { startFleet } from "./fleet";
export type { Fleet, FleetOptions } from "./fleet";
