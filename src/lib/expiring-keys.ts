/**
 * A per-isolate set of keys that each hold until a moment, bounded in size (the entry added longest
 * ago goes first), so a flood of distinct keys cannot grow an isolate's memory.
 */
export class ExpiringKeys {
  private readonly until = new Map<string, number>();

  constructor(private readonly maxSize: number, private readonly now: () => number = Date.now) {}

  /** Holds `key` until `at` (epoch ms). */
  add(key: string, at: number) {
    this.until.delete(key);
    if (this.until.size >= this.maxSize) this.until.delete(this.until.keys().next().value!);
    this.until.set(key, at);
  }

  /** Until when `key` holds, or undefined when it is absent or has passed. */
  heldUntil(key: string): number | undefined {
    const at = this.until.get(key);
    if (at === undefined) return undefined;
    if (at > this.now()) return at;
    this.until.delete(key);
    return undefined;
  }

  has(key: string): boolean {
    return this.heldUntil(key) !== undefined;
  }

  delete(key: string) {
    this.until.delete(key);
  }

  get size() {
    return this.until.size;
  }
}
