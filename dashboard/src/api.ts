/**
 * Calls to the service's API with the httpOnly `access_token` cookie the API set at sign-in (the page
 * never sees or stores the token). Errors carry the API's `detail`.
 */
/** Sent when the API no longer accepts the session (it expired, or the account was deactivated). */
export const SIGNED_OUT_EVENT = "dashboard:signed-out";

export class ApiError extends Error {
  constructor(readonly status: number, detail: string) {
    super(detail);
  }
}

type Json = Record<string, unknown> | unknown[];

export async function api<T>(path: string, init: { method?: string; body?: Json } = {}): Promise<T> {
  const response = await fetch(path, {
    method: init.method ?? "GET",
    credentials: "same-origin",
    headers: init.body === undefined ? { Accept: "application/json" } : { Accept: "application/json", "Content-Type": "application/json" },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  });
  if (response.status === 204) return undefined as T;
  const text = await response.text();
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    throw new ApiError(response.status, `The service answered ${response.status} with something other than JSON`);
  }
  if (response.status === 401 && !path.startsWith("/api/v1/auth/")) window.dispatchEvent(new Event(SIGNED_OUT_EVENT));
  if (!response.ok) throw new ApiError(response.status, detailOf(body) ?? `HTTP ${response.status}`);
  return body as T;
}

function detailOf(body: unknown): string | undefined {
  if (!body || typeof body !== "object" || !("detail" in body)) return undefined;
  const detail = (body as { detail: unknown }).detail;
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) return detail.map((d) => (d && typeof d === "object" && "msg" in d ? String((d as { msg: unknown }).msg) : JSON.stringify(d))).join("; ");
  return JSON.stringify(detail);
}

export const enc = encodeURIComponent;

// ---- what the dashboard reads (the fields it uses of the API's schemas) ----------------------------

export interface Me { id: number; email: string; username: string; is_admin: boolean }
export interface Site { site_id: string; name: string; description: string | null; location: string | null }
export interface SiteHealth {
  site_id: string; total_devices: number; healthy_devices: number; offline_devices: number; error_devices: number;
  health_percentage: number; status_summary: string; last_updated: string;
}
export interface Device {
  site_id: string; device_id: string; name: string; device_type: string; status: string; device_source: "real" | "simulated";
  lifecycle_state: "active" | "suspended" | "retired"; last_seen: string | null; ip_address: string | null;
}
export interface DeviceDetail extends Device { os_type: string | null; os_version: string | null; heartbeat_interval_s: number; created_at: string }
export interface Command {
  command_id: string; device_id: string; command_type: string; status: string; attempts: number; created_at: string;
  completed_at: string | null; result: unknown; error_message: string | null; created_by: string | null;
}
export interface Job {
  job_id: string; site_id: string; action: string; description: string | null; status: string; created_at: string;
  completed_at: string | null; created_by: string | null;
}
export interface Execution { device_id: string; command_id: string | null; status: string; error_message: string | null; completed_at: string | null }
export interface JobDetail extends Job { counts: { total: number; succeeded: number; failed: number; cancelled: number; pending: number }; executions: Execution[] }
export interface Member { user_id: number; username: string; email?: string; role: Role }
export type Role = "viewer" | "operator" | "owner";
export interface StateChange { recorded_at?: string; changed_at?: string; previous_state?: string | null; new_state?: string; status?: string }
