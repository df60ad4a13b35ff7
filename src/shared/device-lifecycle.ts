/**
 * The device lifecycle in one place: which operator action each state allows, and where it leads.
 * Services ask `lifecycleStep` before they act, so a state that does not allow an action is refused
 * the same way (409) whichever route asked. docs/device-lifecycle.md draws the diagram.
 */
export const LIFECYCLE_STATES = ["active", "suspended", "retired", "archived"] as const;
export type LifecycleState = (typeof LIFECYCLE_STATES)[number];

export const LIFECYCLE_ACTIONS = ["suspend", "resume", "retire", "transfer", "reenrol", "archive", "purge"] as const;
export type LifecycleAction = (typeof LIFECYCLE_ACTIONS)[number];

/**
 * From each state, the state an action leads to. `same` keeps the state (a transfer moves a
 * suspended device and it stays suspended); `gone` removes the device. An action missing from a
 * state's row is not allowed there.
 */
const TRANSITIONS: Record<LifecycleState, Partial<Record<LifecycleAction, LifecycleState | "same" | "gone">>> = {
  active: { suspend: "suspended", resume: "same", retire: "retired", transfer: "same", reenrol: "active", archive: "archived", purge: "gone" },
  suspended: { suspend: "same", resume: "active", retire: "retired", transfer: "same", reenrol: "active", archive: "archived", purge: "gone" },
  // A retired device keeps its history; it comes back only through a re-enrolment (a new key).
  retired: { reenrol: "active", archive: "archived", purge: "gone" },
  // Archived: read-only for good; only a purge removes it.
  archived: { purge: "gone" },
};

const PAST: Record<LifecycleAction, string> = {
  suspend: "suspended", resume: "resumed", retire: "retired", transfer: "transferred", reenrol: "re-enrolled", archive: "archived", purge: "purged",
};

export type LifecycleStep = { allowed: true; next: LifecycleState | "gone" } | { allowed: false; reason: string };

/** What `action` does to a device in `state`: where it leads, or why it is refused. */
export function lifecycleStep(state: LifecycleState, action: LifecycleAction): LifecycleStep {
  const target = TRANSITIONS[state][action];
  if (target === undefined) return { allowed: false, reason: `Device is ${state}; it cannot be ${PAST[action]}` };
  return { allowed: true, next: target === "same" ? state : target };
}

/** States whose row an operator may still change (name, settings, key, commands): not retired or archived. */
export const isEditable = (state: LifecycleState) => state === "active" || state === "suspended";

/** What a lifecycle action answers (and, without its one-time api_key, what a repeat replays). */
export interface LifecycleChange {
  action: LifecycleAction;
  device_id: string;
  site_id: string;
  previous_site_id: string | null;
  lifecycle_state: LifecycleState | "purged";
  epoch_id: string | null;
  cancelled_commands: string[];
  reason: string | null;
  at: string;
  api_key?: string;
}
