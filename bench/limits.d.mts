// Types for limits.mjs, so TypeScript tests (test/e2e) can import it.
export declare const DEVICE_LIMIT: { burst: number; perSecond: number };
export declare const MAX_NOT_OK_SHARE: number;
export declare function devicesFor(rate: number, durationS: number, options?: { headroom?: number; spent?: number }): number;
