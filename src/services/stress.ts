export const STRESS_LIMITS = { maxDurationS: 30, maxMemoryMb: 64 } as const;

// Workers freeze the clock while code runs (it only moves across I/O and timers), so CPU work is
// sized by iteration count, not by reading the time inside a busy loop.
const HASHES_PER_TICK_AT_FULL_SHARE = 400;

/**
 * A bounded load generator for checking monitoring and alerting end to end: it holds `memoryMb` of
 * touched memory and hashes in short bursts every 10 ms for `durationS` seconds, so a single request
 * never approaches the Worker's CPU limit.
 */
export async function runStressTest(durationS: number, memoryMb: number, cpuShare: number) {
  const started = performance.now();
  const blocks: Uint8Array[] = [];
  for (let i = 0; i < memoryMb; i++) {
    const block = new Uint8Array(1024 * 1024);
    for (let j = 0; j < block.length; j += 4096) block[j] = (i + j) & 0xff;
    blocks.push(block);
  }
  const perTick = Math.max(1, Math.round(HASHES_PER_TICK_AT_FULL_SHARE * cpuShare));
  let iterations = 0;
  let ticks = 0;
  let digest = new Uint8Array(64);
  while (performance.now() - started < durationS * 1000) {
    for (let i = 0; i < perTick; i++) {
      digest = new Uint8Array(await crypto.subtle.digest("SHA-256", digest));
    }
    iterations += perTick;
    ticks++;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const heldBytes = blocks.reduce((sum, b) => sum + b.length, 0);
  return { duration_s: (performance.now() - started) / 1000, memory_mb: heldBytes / (1024 * 1024), hash_iterations: iterations, ticks };
}
