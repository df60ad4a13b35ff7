/**
 * A per-isolate map whose entries each lapse at their own moment, bounded in size (the entry set
 * longest ago goes first), so a flood of distinct keys cannot grow an isolate's memory.
 */
export class ExpiringMap<V> {
  private readonly entries = new Map<string, { value: V; expiresAt: number }>();

  constructor(private readonly maxSize: number, private readonly now: () => number = Date.now) {}

  /** Holds `value` under `key` until `expiresAt` (epoch ms). */
  set(key: string, value: V, expiresAt: number) {
    this.entries.delete(key);
    if (this.entries.size >= this.maxSize) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, { value, expiresAt });
  }

  /** The value under `key`, or undefined when it is absent or has lapsed. */
  get(key: string): V | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    if (entry.expiresAt > this.now()) return entry.value;
    this.entries.delete(key);
    return undefined;
  }

  has(key: string): boolean {
    return this.get(key) !== undefined;
  }

  delete(key: string) {
    this.entries.delete(key);
  }

  /** Drops every entry whose key matches (a scan: for rare events only). */
  deleteWhere(matches: (key: string) => boolean) {
    for (const key of this.entries.keys()) if (matches(key)) this.entries.delete(key);
  }

  get size() {
    return this.entries.size;
  }
}
