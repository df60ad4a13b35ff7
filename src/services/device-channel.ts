import type { DeviceCredential, Env } from "../env";
import { siteHub } from "../hub/client";
import { admitCredential, admitThroughHub } from "./device-auth";

/**
 * A device's channel upgrade, admitted exactly like a heartbeat: the hub checks the key digest in
 * the same call that accepts the socket, and only a key it has not seen pass costs a (throttled)
 * bcrypt here. Every refusal (401, 403, 429) is an HTTP answer, before any socket exists.
 */
export async function openDeviceChannel(env: Env, credential: DeviceCredential, upgrade: string) {
  const hub = siteHub(env, credential.siteId);
  const { value } = await admitThroughHub(env, credential, (keyDigest) => hub.openDeviceChannel(credential.deviceId, keyDigest, upgrade));
  return value;
}

/** Without an upgrade: whether the device has a channel open now (after the same admission). */
export async function deviceChannelState(env: Env, credential: DeviceCredential) {
  await admitCredential(env, credential);
  const connected = await siteHub(env, credential.siteId).channelDevices();
  return { device_id: credential.deviceId, site_id: credential.siteId, connected: connected.includes(credential.deviceId) };
}
