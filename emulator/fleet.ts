import { setMaxListeners } from "node:events";
import { apiClient } from "./client";
import { EmulatedDevice, Enroller, type Cadence, type EnrolmentMethod, type TransportMode } from "./device";
import { FleetStats } from "./stats";

export interface FleetOptions {
  url: string;
  siteId: string;
  devices: number;
  enrolment: EnrolmentMethod;
  cadence: Cadence;
  /** `http` (default) or `channel`: heartbeat, telemetry and commands over the device channel. */
  mode?: TransportMode;
  /** Device names are `<namePrefix>-<n>`; unique per run by default, since a site's device names are unique. */
  namePrefix?: string;
  restartS?: number;
  updateFailureRate?: number;
}

export interface Fleet {
  stats: FleetStats;
  devices: EmulatedDevice[];
  online(): number;
  /** Devices with their device channel open now. */
  onChannel(): number;
  /** Stops every device (in-flight calls are abandoned) and resolves once all have stopped. */
  stop(): Promise<void>;
}

/** Starts `devices` emulated terminals against the service at `url`; they run until `stop`. */
export function startFleet(options: FleetOptions): Fleet {
  const stats = new FleetStats();
  const api = apiClient(options.url);
  const enroller = new Enroller(api, options.siteId, options.enrolment, stats);
  const prefix = options.namePrefix ?? `emu-${Date.now().toString(36)}`;
  const controller = new AbortController();
  // Each device follows this signal with one listener of its own: a thousand of them are the fleet
  // working as designed, not a leak for Node to warn about.
  setMaxListeners(Math.max(100, options.devices * 2), controller.signal);
  const devices = Array.from({ length: options.devices }, (_, i) => new EmulatedDevice({
    api, url: options.url, mode: options.mode ?? "http", siteId: options.siteId, name: `${prefix}-${i + 1}`, cadence: options.cadence, enrolment: enroller, stats,
    restartS: options.restartS ?? 5, updateFailureRate: options.updateFailureRate ?? 0.1,
  }));
  const running = devices.map((d) => d.run(controller.signal));
  return {
    stats,
    devices,
    online: () => devices.filter((d) => d.online).length,
    onChannel: () => devices.filter((d) => d.channel).length,
    async stop() {
      controller.abort();
      await Promise.allSettled(running);
    },
  };
}
