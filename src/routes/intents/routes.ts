import { THROTTLING_DESCRIPTION, apiRoute, jsonBody, jsonResponse, newRouter } from "../../lib/openapi";
import {
  changeIntentStatus,
  claimIntent,
  createIntent,
  getIntent,
  listIntents,
  regenerateIntentToken,
  revokeIntent,
} from "../../services/intents";
import * as s from "./schema";
import { provisionAnswer } from "../devices/schema";
import { withCreationTime } from "../../services/devices";

const TAGS = ["Enrolment intents"];
const BASE = "/{site_id}/enrolment-intents";

/** Site-scoped intent management, mounted under `/api/v1/sites`: viewers read, operators change. */
export const siteIntentRoutes = newRouter();

siteIntentRoutes.openapi(
  apiRoute({
    method: "post",
    path: BASE,
    auth: "user", access: { site: "operator", outsider: "forbidden" },
    tags: TAGS,
    summary: "Create an enrolment intent (operator)",
    description:
      "Pre-provisions one device on the site. Answers 201 with the intent and its one-time `claim_token`, the only time " +
      "the plaintext is shown (the service stores a bcrypt hash and never returns it). The intent starts `pending`; " +
      "approve it before the device can claim it. With `idempotency_key`: a retry with the same key and the same body " +
      "on the same site answers **200** with the already-created intent and **no** `claim_token` (regenerate the token if " +
      "it was lost); the same key with a different body is 422.",
    request: { params: s.SiteParams, ...jsonBody(s.CreateIntentBody) },
    responses: {
      201: jsonResponse(s.IntentWithToken, "Intent created; the claim token is shown only here"),
      200: jsonResponse(s.Intent, "Idempotent replay: the intent created earlier with this key, without a token"),
    },
    errors: [403, 404],
  }),
  async (c) => {
    const { site_id } = c.req.valid("param");
    const body = c.req.valid("json");
    const user = c.var.user!;
    const result = await createIntent(c.env, c.var.db, site_id, {
      expectedDeviceIdentity: body.expected_device_identity,
      expiresInHours: body.expires_in_hours,
      idempotencyKey: body.idempotency_key,
    }, { userId: user.id, request: c.req.raw });
    if (!result.created) return c.json(s.toIntent(result.intent), 200);
    return c.json({ ...s.toIntent(result.intent), claim_token: result.claimToken }, 201);
  },
);

siteIntentRoutes.openapi(
  apiRoute({
    method: "get",
    path: BASE,
    auth: "user", access: { site: "viewer", outsider: "forbidden" },
    tags: TAGS,
    summary: "List a site's enrolment intents",
    description: "Newest first, optionally filtered by `status`; `limit` (default 50, max 500) and `offset` page through `total`.",
    request: { params: s.SiteParams, query: s.ListIntentsQuery },
    responses: { 200: jsonResponse(s.IntentList, "Intents") },
    errors: [403, 404],
  }),
  async (c) => {
    const { site_id } = c.req.valid("param");
    const query = c.req.valid("query");
    const { rows, total } = await listIntents(c.var.db, site_id, query);
    return c.json({ intents: rows.map(s.toIntent), total }, 200);
  },
);

siteIntentRoutes.openapi(
  apiRoute({
    method: "get",
    path: `${BASE}/{intent_id}`,
    auth: "user", access: { site: "viewer", outsider: "forbidden" },
    tags: TAGS,
    summary: "Enrolment intent detail",
    description: "Full details (never the token hash). An intent of another site is 404 under this site's path.",
    request: { params: s.IntentParams },
    responses: { 200: jsonResponse(s.Intent, "The intent") },
    errors: [403, 404],
  }),
  async (c) => {
    const { site_id, intent_id } = c.req.valid("param");
    return c.json(s.toIntent(await getIntent(c.var.db, site_id, intent_id)), 200);
  },
);

siteIntentRoutes.openapi(
  apiRoute({
    method: "put",
    path: `${BASE}/{intent_id}`,
    auth: "user", access: { site: "operator", outsider: "forbidden" },
    tags: TAGS,
    summary: "Approve, reject or revoke a pending intent (operator)",
    description:
      "Sets `status` to `approved` (the token becomes claimable), `rejected` or `revoked`. " +
      "The status can only change while the intent is `pending`; any other current status (including `approved`) " +
      "answers 400. Operators also need to withdraw an intent that is already approved (the operator UI offers Revoke " +
      "for approved intents), so this service adds `POST /api/v1/sites/{site_id}/enrolment-intents/{intent_id}/revoke`, " +
      "which revokes pending **and** approved intents. An intent whose `expires_at` has passed is expired first (400).",
    request: { params: s.IntentParams, ...jsonBody(s.UpdateIntentBody) },
    responses: { 200: jsonResponse(s.Intent, "The updated intent") },
    errors: [403, 404, 409],
  }),
  async (c) => {
    const { site_id, intent_id } = c.req.valid("param");
    const { status } = c.req.valid("json");
    const user = c.var.user!;
    const intent = await changeIntentStatus(c.env, c.var.db, site_id, intent_id, status, { userId: user.id, request: c.req.raw });
    return c.json(s.toIntent(intent), 200);
  },
);

siteIntentRoutes.openapi(
  apiRoute({
    method: "post",
    path: `${BASE}/{intent_id}/revoke`,
    auth: "user", access: { site: "operator", outsider: "forbidden" },
    tags: TAGS,
    summary: "Revoke a pending or approved intent (operator)",
    description:
      "The PUT on an intent only changes a `pending` intent, but " +
      "operators must be able to withdraw an `approved` intent whose token may have leaked. Revocation is final; any " +
      "other status answers 400.",
    request: { params: s.IntentParams },
    responses: { 200: jsonResponse(s.Intent, "The revoked intent") },
    errors: [400, 403, 404, 409],
  }),
  async (c) => {
    const { site_id, intent_id } = c.req.valid("param");
    const user = c.var.user!;
    return c.json(s.toIntent(await revokeIntent(c.env, c.var.db, site_id, intent_id, { userId: user.id, request: c.req.raw })), 200);
  },
);

siteIntentRoutes.openapi(
  apiRoute({
    method: "post",
    path: `${BASE}/{intent_id}/regenerate-token`,
    auth: "user", access: { site: "operator", outsider: "forbidden" },
    tags: TAGS,
    summary: "Issue a new claim token (operator)",
    description:
      "For a `pending` or `approved` intent: answers the intent with a new `claim_token` (shown only here); the status " +
      "and expiry stay, and the previous token stops working at once. Any other status answers 400.",
    request: { params: s.IntentParams },
    responses: { 200: jsonResponse(s.IntentWithToken, "The intent with its new claim token") },
    errors: [400, 403, 404, 409],
  }),
  async (c) => {
    const { site_id, intent_id } = c.req.valid("param");
    const user = c.var.user!;
    const { intent, claimToken } = await regenerateIntentToken(c.env, c.var.db, site_id, intent_id, { userId: user.id, request: c.req.raw });
    return c.json({ ...s.toIntent(intent), claim_token: claimToken }, 200);
  },
);

/** The unauthenticated claim, mounted under `/api/v1/enrolment-intents`. */
export const intentClaimRoutes = newRouter();

intentClaimRoutes.openapi(
  apiRoute({
    method: "post",
    path: "/{intent_id}/claim",
    auth: "none",
    tags: TAGS,
    summary: "Claim an enrolment intent (device; the token is the credential)",
    description:
      "Atomically consumes an `approved`, unexpired intent presented with its current claim token (and, when the intent " +
      "has one, the matching `device_identity`), creates the device (`enrollment_method` `pre-provisioned`) with its " +
      "lifecycle epoch, and answers 201 with the device's one-time `api_key` (the same shape and status as bootstrap " +
      "self-enrolment). All or nothing: of any number of " +
      "concurrent claims exactly one succeeds. Every failure is 400: an unknown intent and a wrong token get the same " +
      `body ("Invalid enrolment intent or claim token"); only a caller with the right token learns why the intent cannot ` +
      `be claimed (not approved, rejected, revoked, expired, already claimed, identity mismatch, device_name already used ` +
      "in the site). Failed claims are counted per intent id (whether or not it exists) and per client address: " +
      THROTTLING_DESCRIPTION,
    request: { params: s.ClaimParams, ...jsonBody(s.ClaimBody) },
    responses: { 201: jsonResponse(s.ClaimResponse, "Claimed: the new device and its credentials") },
    errors: [429],
  }),
  async (c) => {
    const { intent_id } = c.req.valid("param");
    const body = c.req.valid("json");
    const result = await claimIntent(c.env, c.var.db, intent_id, {
      claimToken: body.claim_token,
      deviceName: body.device_name,
      deviceType: body.device_type,
      deviceIdentity: body.device_identity ?? body.expected_device_identity,
    }, c.req.raw);
    const claimed = await withCreationTime(c.var.db, result);
    return c.json(provisionAnswer(claimed, result.siteId, claimed.createdAt, "Device claimed successfully"), 201);
  },
);
