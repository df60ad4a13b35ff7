// Types for serve-bundle.mjs, so TypeScript tests (test/e2e) can import it.
export interface StartServiceOptions {
  port?: number;
  host?: string;
  bindings?: Record<string, string | undefined>;
  assets?: boolean;
  migrate?: boolean;
  env?: string;
  quiet?: boolean;
  logLevel?: number;
  dist?: string;
  config?: string;
}

/** Minimal view of the D1 binding returned by Miniflare (see @cloudflare/workers-types for the rest). */
export interface ServiceD1 {
  prepare(query: string): { bind(...values: unknown[]): { first<T = Record<string, unknown>>(): Promise<T | null>; all<T = Record<string, unknown>>(): Promise<{ results: T[] }>; run(): Promise<unknown> }; first<T = Record<string, unknown>>(): Promise<T | null>; all<T = Record<string, unknown>>(): Promise<{ results: T[] }>; run(): Promise<unknown> };
  batch(statements: unknown[]): Promise<unknown[]>;
}

export interface ServiceMiniflare {
  ready: Promise<URL>;
  getD1Database(binding: string): Promise<ServiceD1>;
  getDurableObjectNamespace(binding: string): Promise<unknown>;
  getWorker(): Promise<unknown>;
  dispose(): Promise<void>;
}

export interface RunningService {
  /** e.g. "http://127.0.0.1:40123" (no trailing slash) */
  url: string;
  mf: ServiceMiniflare;
  /** The vars and secrets the Worker was given (including the generated JWT_SECRET). */
  env: Record<string, string>;
  /** Runs the Worker's scheduled() handler once. */
  scheduled(cron?: string, scheduledTime?: number): Promise<{ outcome: string; noRetry: boolean }>;
  stop(): Promise<void>;
}

export declare const ROOT: string;
export declare function generateSecret(): string;
export declare function readMigrations(dir?: string): { name: string; queries: string[] }[];
export declare function applyMigrations(db: ServiceD1, migrations?: { name: string; queries: string[] }[]): Promise<string[]>;
export declare function startService(options?: StartServiceOptions): Promise<RunningService>;
