import { normaliseCommandType } from "./vocabulary";

/**
 * Device consent: what a device's owner allows the fleet to do to it, limited by what its OS can do.
 * Shared by the Worker (command queue, permission routes) and the site hubs (job fan-out), so both
 * apply the one mapping from command types to permissions (docs/original-agents.md lists it).
 */

export const PERMISSIONS = ["root_access", "command_execution", "process_monitoring", "filesystem_access", "network_monitoring"] as const;
export type Permission = (typeof PERMISSIONS)[number];
export type PermissionSet = Record<Permission, boolean>;

const all = (value: boolean): PermissionSet => ({
  root_access: value, command_execution: value, process_monitoring: value, filesystem_access: value, network_monitoring: value,
});

/**
 * What a device's OS lets it grant, from its OS type and details. Mobile and Windows agents never run
 * as root; iOS agents can only watch the network. An OS we cannot name is not restricted: we cannot
 * tell what it lacks, and the device itself still decides what it grants.
 */
export function capabilitiesFor(os: string | null | undefined): PermissionSet {
  const text = (os ?? "").toLowerCase();
  if (/\b(ios|iphone|ipad|ipados)\b/.test(text)) return { ...all(false), network_monitoring: true };
  if (/android|windows/.test(text)) return { ...all(true), root_access: false };
  return all(true);
}

/**
 * The permissions in force. A device that never set any is not restricted (within its OS): the
 * reasons are in docs/original-agents.md, "Consent".
 */
export function effectivePermissions(stored: Partial<PermissionSet> | null | undefined, capabilities: PermissionSet): PermissionSet {
  const result = { ...capabilities };
  if (stored) for (const p of PERMISSIONS) result[p] = capabilities[p] && stored[p] === true;
  return result;
}

/** Command types that need a permission; a type not listed here needs `command_execution`. */
const REQUIRED: Record<string, readonly Permission[]> = {
  ping: [],
  notify: [],
  status_request: [],
  request_permission: [],
  health_check: ["command_execution"],
  diagnostics: ["command_execution"],
  restart_pos_app: ["command_execution"],
  run_command: ["command_execution"],
  run_script: ["command_execution"],
  restart: ["root_access"],
  reboot: ["root_access"],
  shutdown: ["root_access"],
  update: ["filesystem_access"],
  update_config: ["filesystem_access"],
  update_pos_payment_config: ["filesystem_access"],
  backup: ["filesystem_access"],
  clear_cache: ["filesystem_access"],
  collect_logs: ["filesystem_access"],
};

/** The command types with a fixed requirement, for the documentation. */
export const COMMAND_PERMISSIONS: Readonly<Record<string, readonly Permission[]>> = REQUIRED;

/** What a command of this type (and payload) needs: `run_as_root` on a command or script adds root_access. */
export function requiredPermissions(commandType: string, payload?: Record<string, unknown> | null): Permission[] {
  const type = normaliseCommandType(commandType) ?? commandType.trim().toLowerCase();
  const needed = new Set<Permission>(REQUIRED[type] ?? ["command_execution"]);
  if (type === "run_command" || type === "run_script") {
    const data = payload && typeof payload.data === "object" && payload.data !== null ? payload.data as Record<string, unknown> : payload;
    if (data?.run_as_root === true) needed.add("root_access");
  }
  return PERMISSIONS.filter((p) => needed.has(p));
}

/** The permissions a command needs that the device has not granted (empty: it may be queued). */
export function missingPermissions(required: readonly Permission[], granted: PermissionSet): Permission[] {
  return required.filter((p) => !granted[p]);
}

/** The reason a refused or skipped command gives. */
export const consentRefusal = (missing: readonly Permission[]) =>
  `Device owner has not granted the required permissions: ${missing.join(", ")}`;
