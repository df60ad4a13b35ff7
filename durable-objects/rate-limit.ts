/**
 * Per-device token bucket, kept in the hub's memory: a terminal calls ~0.3 times a second, so a
 * sustained 2 calls/s with a burst of 60 only stops a device (or a stolen key) that is looping.
 * Keyed by device, never by IP: a store's terminals share one NAT address.
 */
export class DeviceRateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(private readonly capacity = 60, private readonly refillPerSecond = 2) {}

  /** Takes one token; returns 0 when admitted, else the seconds until a token is available. */
  take(deviceId: string, now: number): number {
    const bucket = this.buckets.get(deviceId) ?? { tokens: this.capacity, at: now };
    bucket.tokens = Math.min(this.capacity, bucket.tokens + ((now - bucket.at) / 1000) * this.refillPerSecond);
    bucket.at = now;
    this.buckets.set(deviceId, bucket);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return 0;
    }
    if (this.buckets.size > 20_000) this.prune(now);
    return Math.ceil((1 - bucket.tokens) / this.refillPerSecond);
  }

  private prune(now: number) {
    for (const [id, b] of this.buckets) if (now - b.at > (this.capacity / this.refillPerSecond) * 1000) this.buckets.delete(id);
  }
}
