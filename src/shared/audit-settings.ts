import { DELIVERY_RETRY_BASE_MS } from "./alert-contract";
import type { HubBindings } from "./config";
import type { OutboundPolicy } from "./outbound-address";

/**
 * The settings of alert and integration deliveries. Two exist for tests only and are never set in
 * wrangler.toml: AUDIT_ALLOW_LOOPBACK_RECEIVERS=true lets plain http:// and TCP reach 127.0.0.1 /
 * localhost (a receiver started by the test), and AUDIT_DELIVERY_RETRY_BASE_MS shortens the retry
 * backoff so a test sees retries in seconds.
 */
export function outboundPolicy(vars: HubBindings): OutboundPolicy {
  return { allowLoopback: vars.AUDIT_ALLOW_LOOPBACK_RECEIVERS === "true" };
}

export function retryBaseMs(vars: HubBindings): number {
  const value = Number(vars.AUDIT_DELIVERY_RETRY_BASE_MS);
  return Number.isFinite(value) && value > 0 ? value : DELIVERY_RETRY_BASE_MS;
}

/** Alert e-mail needs the send_email binding and a sender address; without both, rules say it is unavailable. */
export const emailAvailable = (vars: HubBindings) => vars.ALERT_EMAIL !== undefined && Boolean(vars.ALERT_EMAIL_FROM);
