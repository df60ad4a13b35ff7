import { call, createSite, signup } from "./helpers";

export async function siteWithOperator() {
  const owner = await signup();
  const siteId = await createSite(owner.token);
  return { owner, siteId };
}

export async function registerDevice(token: string, siteId: string, body: Record<string, unknown> = {}) {
  const res = await call(`/api/v1/devices/sites/${siteId}/devices`, { method: "POST", token, body: { name: "Till", device_type: "pos_terminal", ...body } });
  if (res.status !== 201) throw new Error(`register failed: ${res.status} ${res.text}`);
  return res.json as { device_id: string; api_key: string; site_id: string; epoch_id: string };
}

export const deviceHeaders = (deviceId: string, apiKey: string) => ({ "X-Device-ID": deviceId, "X-API-Key": apiKey });

export const heartbeat = (deviceId: string, apiKey: string, body: Record<string, unknown> = {}, path = "/api/v1/agent/heartbeat") =>
  call(path, { method: "POST", headers: deviceHeaders(deviceId, apiKey), body });

export const telemetry = (deviceId: string, apiKey: string, body: unknown, path = "/api/v1/agent/telemetry") =>
  call(path, { method: "POST", headers: deviceHeaders(deviceId, apiKey), body });
