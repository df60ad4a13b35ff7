// Types for local-cron.mjs, so TypeScript tests (test/e2e) can import it.
export declare const LOCAL_CRON: string;
export declare function devServerArgs(options: { host: string; port: number | string; extra?: string[] }): string[];
export declare function triggerScheduled(baseUrl: string, options?: { cron?: string; timeoutMs?: number }): Promise<string>;
export interface LocalCron {
  /** Settles when the run made at start has finished. */
  first: Promise<void>;
  stop(): void;
}
export declare function startLocalCron(options: {
  baseUrl: string;
  cron?: string;
  onRun?: (answer: string) => void;
  onError?: (error: Error) => void;
  now?: () => number;
}): LocalCron;
