import type { AuthUser, Db } from "../env";
import { forbidden, unprocessable } from "../lib/errors";
import { classify, type Category, type Severity } from "../shared/vocabulary";
import { authorizeSite, deviceNotFound } from "./access";
import { recordAudit } from "./audit";
import { findDevice } from "./devices";

export interface CustomEventInput {
  event_type: string;
  category?: Category;
  description?: string;
  metadata?: Record<string, unknown>;
  severity?: Severity;
  site_id?: string;
  device_id?: string;
  session_id?: string;
}

// Users record business and user-action events; everything else is the service's own testimony.
const USER_CATEGORIES = new Set<string>(["business_events", "user_actions"]);

/**
 * Records an event a user reports (`POST /audit/events`). Reserved event types and categories, and
 * the critical severity (it pages someone), are for administrators only. A device's trail may only
 * be written by someone who operates its site, and the event carries that site.
 */
export async function recordCustomEvent(db: Db, user: AuthUser, input: CustomEventInput, request: Request) {
  const category = input.category ?? classify(input.event_type).category;
  if (!user.isAdmin && (!USER_CATEGORIES.has(category) || classify(input.event_type).category !== "business_events")) {
    throw forbidden(`Only administrators may record '${input.event_type}' events in category '${category}'`);
  }
  if (!user.isAdmin && input.severity === "critical") throw forbidden("Only administrators may record critical events");
  let siteId = input.site_id;
  if (input.device_id) {
    const deviceId = input.device_id;
    const device = await findDevice(db, deviceId);
    if (!device) throw deviceNotFound(deviceId);
    // Access first: whether the device belongs to site_id is only told to someone who may see it.
    await authorizeSite(db, user, device.siteId, "operator", request, { hiddenAs: () => deviceNotFound(deviceId) });
    if (siteId && siteId !== device.siteId) {
      throw unprocessable([{ loc: ["body", "device_id"], msg: "The device does not belong to site_id", type: "value_error" }]);
    }
    siteId = device.siteId;
  } else if (siteId) {
    await authorizeSite(db, user, siteId, "operator", request);
  }
  return recordAudit(db, {
    eventType: input.event_type,
    category: input.category,
    severity: input.severity,
    description: input.description,
    metadata: input.metadata,
    siteId,
    deviceId: input.device_id,
    sessionId: input.session_id,
    userId: user.id,
    request,
  });
}
