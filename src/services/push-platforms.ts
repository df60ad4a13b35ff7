import type { Env } from "../env";
import { unprocessable } from "../lib/errors";
import { webPushSetup } from "./web-push";
import { apnsSetup, fcmSetup } from "./vendor-push";

export const PUSH_PLATFORM_IDS = ["device_channel", "command_poll", "web_push", "fcm", "apns", "wns", "mqtt"] as const;
export type PushPlatformId = (typeof PUSH_PLATFORM_IDS)[number];

/** Platforms a push goes out on through the device's command queue. */
const QUEUE_CHANNELS: readonly PushPlatformId[] = ["device_channel", "command_poll"];

export interface PushPlatformInfo {
  id: PushPlatformId;
  name: string;
  available: boolean;
  reason: string;
}

/**
 * What each push platform can do here, said plainly. A platform is listed as available only when
 * this service actually delivers through it; the vendor channels it cannot use say why.
 */
export function pushPlatforms(env: Env): PushPlatformInfo[] {
  const webPush = webPushSetup(env);
  const fcm = fcmSetup(env);
  const apns = apnsSetup(env);
  return [
    {
      id: "device_channel", name: "Device channel (WebSocket to the site's hub)", available: true,
      reason: "A notification is queued as a notify command in the device's site hub; a device holding the live device channel receives it as soon as it is queued",
    },
    {
      id: "command_poll", name: "Command poll (HTTP)", available: true,
      reason: "A notification is queued as a notify command with its time to live; the device receives it on its next poll of /api/v1/devices/pending (at once on a long poll)",
    },
    {
      id: "web_push", name: "Web Push (signed-in users' browsers)", available: webPush.ok,
      reason: webPush.ok
        ? "Signed-in users who registered a browser subscription (/api/v1/push/subscriptions) get device-offline notifications for the sites they can view; devices are not Web Push targets"
        : webPush.reason,
    },
    {
      id: "fcm", name: "Firebase Cloud Messaging (Android)", available: fcm.ok,
      reason: fcm.ok ? "Sent through FCM HTTP v1 to the registration token a device reported as device_token in its DNA" : fcm.reason,
    },
    {
      id: "apns", name: "Apple Push Notification service", available: apns.ok,
      reason: apns.ok ? "Sent through APNs with token-based authentication to the device token a device reported as device_token in its DNA" : apns.reason,
    },
    {
      id: "wns", name: "Windows Push Notification Services", available: false,
      reason: "Not supported: Windows devices receive notifications through the device channel or the command poll",
    },
    {
      id: "mqtt", name: "MQTT", available: false,
      reason: "Not supported: a Worker cannot hold an MQTT broker connection; devices receive notifications through the device channel or the command poll",
    },
  ];
}

/**
 * A send that names a platform must name one it can go out on: the device's command queue serves
 * both the device channel and the poll; FCM and APNs when configured. Any other platform is refused
 * with its reason.
 */
export function ensureSendablePlatform(env: Env, platform: PushPlatformId | undefined, at: (string | number)[]) {
  if (platform === undefined || QUEUE_CHANNELS.includes(platform)) return;
  if ((platform === "fcm" && fcmSetup(env).ok) || (platform === "apns" && apnsSetup(env).ok)) return;
  if (platform === "web_push") {
    throw unprocessable([{ loc: at, msg: "Web Push reaches signed-in users' browsers, not devices: send to devices on device_channel or command_poll", type: "platform_unavailable" }]);
  }
  const info = pushPlatforms(env).find((p) => p.id === platform)!;
  throw unprocessable([{ loc: at, msg: `Platform ${platform} is unavailable: ${info.reason}`, type: "platform_unavailable" }]);
}
