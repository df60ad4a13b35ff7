/**
 * A piece of the hub that needs time: `nextWake` says when it next has work (undefined: none), and
 * `onAlarm` does whatever is due. The hub keeps one alarm at the earliest wake of all parts, so an
 * idle site has no alarm at all.
 */
export interface TimedPart {
  nextWake(now: number): number | undefined;
  onAlarm(now: number): Promise<void>;
}
