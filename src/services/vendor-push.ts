/**
 * Vendor push platforms behind one interface: Firebase Cloud Messaging (HTTP v1, a service
 * account's signed JWT exchanged for an OAuth token) and the Apple Push Notification service
 * (token-based auth, an ES256 JWT). Each is available only when its credentials are configured and
 * parse; the reason says which setting is missing or wrong. Access tokens are kept per isolate until
 * shortly before they expire, as both vendors ask.
 */
import { SignJWT, importPKCS8 } from "jose";
import type { Env } from "../env";
import { workerClock } from "../lib/clock";

export type VendorPlatformId = "fcm" | "apns";

/** What the vendor said about one message: accepted for delivery, or refused and why. */
export interface VendorOutcome {
  accepted: boolean;
  httpStatus: number | null;
  reason: string | null;
  /** The vendor says the device's token is no longer valid. */
  tokenGone: boolean;
}

export interface VendorMessage {
  title: string;
  body?: string;
  data?: Record<string, unknown>;
  priority: "low" | "normal" | "high";
  ttlSeconds: number;
}

export interface PushPlatform {
  readonly id: VendorPlatformId;
  send(deviceToken: string, message: VendorMessage): Promise<VendorOutcome>;
}

export type VendorSetup = { ok: true; platform: PushPlatform } | { ok: false; reason: string };

const TIMEOUT_MS = 10_000;

/**
 * A test-only base URL for a vendor's API: honoured only for plain http on 127.0.0.1, so a
 * deployed service always talks to the vendor itself.
 */
function testBaseUrl(value: string | undefined): string | undefined {
  if (!value) return undefined;
  try {
    const url = new URL(value);
    return url.protocol === "http:" && url.hostname === "127.0.0.1" ? url.origin : undefined;
  } catch {
    return undefined;
  }
}

const nowS = () => Math.floor(workerClock.now() / 1000);

async function post(url: string, init: RequestInit): Promise<Response | string> {
  try {
    return await fetch(url, { ...init, method: "POST", signal: AbortSignal.timeout(TIMEOUT_MS) });
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

// ---- FCM HTTP v1 ------------------------------------------------------------------------------

interface ServiceAccount { projectId: string; clientEmail: string; privateKey: string; privateKeyId?: string }

const FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging";
const GOOGLE_TOKEN_URL = "https://oauth2.googleapis.com/token";
const FCM_API = "https://fcm.googleapis.com";

function parseServiceAccount(raw: string): ServiceAccount | string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return "FCM_SERVICE_ACCOUNT is not JSON (paste the service account key file)";
  }
  const account = typeof parsed === "object" && parsed !== null ? (parsed as Record<string, unknown>) : {};
  const field = (name: string) => (typeof account[name] === "string" && account[name] ? String(account[name]) : undefined);
  const projectId = field("project_id");
  const clientEmail = field("client_email");
  const privateKey = field("private_key");
  const missing = [["project_id", projectId], ["client_email", clientEmail], ["private_key", privateKey]].filter(([, v]) => !v).map(([n]) => n);
  if (missing.length) return `FCM_SERVICE_ACCOUNT lacks ${missing.join(", ")}`;
  if (!privateKey!.includes("BEGIN PRIVATE KEY")) return "FCM_SERVICE_ACCOUNT's private_key is not a PKCS #8 PEM key";
  return { projectId: projectId!, clientEmail: clientEmail!, privateKey: privateKey!, privateKeyId: field("private_key_id") };
}

const fcmTokens = new Map<string, { token: string; expiresAtS: number }>();

class FcmPlatform implements PushPlatform {
  readonly id = "fcm";
  private readonly tokenUrl: string;
  private readonly apiBase: string;

  constructor(private readonly account: ServiceAccount, testBase: string | undefined) {
    this.tokenUrl = testBase ? `${testBase}/token` : GOOGLE_TOKEN_URL;
    this.apiBase = testBase ?? FCM_API;
  }

  /** An OAuth access token for the service account, reused until a minute before it expires. */
  private async accessToken(): Promise<string | VendorOutcome> {
    const cacheKey = `${this.tokenUrl} ${this.account.clientEmail}`;
    const cached = fcmTokens.get(cacheKey);
    if (cached && cached.expiresAtS - 60 > nowS()) return cached.token;
    const key = await importPKCS8(this.account.privateKey, "RS256");
    const issuedAt = nowS();
    const assertion = await new SignJWT({ scope: FCM_SCOPE })
      .setProtectedHeader({ alg: "RS256", typ: "JWT", ...(this.account.privateKeyId ? { kid: this.account.privateKeyId } : {}) })
      .setIssuer(this.account.clientEmail)
      .setAudience(this.tokenUrl)
      .setIssuedAt(issuedAt)
      .setExpirationTime(issuedAt + 3600)
      .sign(key);
    const response = await post(this.tokenUrl, {
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ grant_type: "urn:ietf:params:oauth:grant-type:jwt-bearer", assertion }).toString(),
    });
    if (typeof response === "string") return refused(null, `Google's token endpoint could not be reached: ${response}`);
    const body = await response.json().catch(() => undefined) as { access_token?: unknown; expires_in?: unknown; error_description?: unknown; error?: unknown } | undefined;
    if (!response.ok || typeof body?.access_token !== "string") {
      return refused(response.status, `Google refused the service account (${String(body?.error_description ?? body?.error ?? response.status)}): check FCM_SERVICE_ACCOUNT`);
    }
    const expiresIn = typeof body.expires_in === "number" ? body.expires_in : 3600;
    fcmTokens.set(cacheKey, { token: body.access_token, expiresAtS: issuedAt + expiresIn });
    return body.access_token;
  }

  async send(deviceToken: string, message: VendorMessage): Promise<VendorOutcome> {
    const token = await this.accessToken();
    if (typeof token !== "string") return token;
    const response = await post(`${this.apiBase}/v1/projects/${encodeURIComponent(this.account.projectId)}/messages:send`, {
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      body: JSON.stringify({
        message: {
          token: deviceToken,
          notification: { title: message.title, ...(message.body !== undefined ? { body: message.body } : {}) },
          // FCM data values are strings only.
          ...(message.data ? { data: Object.fromEntries(Object.entries(message.data).map(([k, v]) => [k, typeof v === "string" ? v : JSON.stringify(v)])) } : {}),
          android: { priority: message.priority === "high" ? "HIGH" : "NORMAL", ttl: `${message.ttlSeconds}s` },
        },
      }),
    });
    if (typeof response === "string") return refused(null, `FCM could not be reached: ${response}`);
    if (response.ok) {
      await response.body?.cancel();
      return { accepted: true, httpStatus: response.status, reason: null, tokenGone: false };
    }
    const error = await response.json().catch(() => undefined) as { error?: { status?: string; message?: string; details?: { errorCode?: string }[] } } | undefined;
    const code = error?.error?.details?.find((d) => d.errorCode)?.errorCode ?? error?.error?.status ?? String(response.status);
    return { ...refused(response.status, `FCM refused the message: ${code}${error?.error?.message ? ` (${error.error.message})` : ""}`), tokenGone: code === "UNREGISTERED" };
  }
}

// ---- APNs token-based auth --------------------------------------------------------------------

interface ApnsSettings { keyId: string; teamId: string; privateKey: string; topic: string; sandbox: boolean }

/** Apple asks for a new provider token at most every 20 minutes and refuses one older than an hour. */
const APNS_TOKEN_REUSE_S = 50 * 60;
const apnsTokens = new Map<string, { jwt: string; issuedAtS: number }>();

class ApnsPlatform implements PushPlatform {
  readonly id = "apns";
  private readonly apiBase: string;

  constructor(private readonly settings: ApnsSettings, testBase: string | undefined) {
    this.apiBase = testBase ?? (settings.sandbox ? "https://api.sandbox.push.apple.com" : "https://api.push.apple.com");
  }

  private async providerToken(): Promise<string> {
    const cacheKey = `${this.settings.teamId} ${this.settings.keyId}`;
    const cached = apnsTokens.get(cacheKey);
    if (cached && nowS() - cached.issuedAtS < APNS_TOKEN_REUSE_S) return cached.jwt;
    const issuedAt = nowS();
    const jwt = await new SignJWT({})
      .setProtectedHeader({ alg: "ES256", kid: this.settings.keyId })
      .setIssuer(this.settings.teamId)
      .setIssuedAt(issuedAt)
      .sign(await importPKCS8(this.settings.privateKey, "ES256"));
    apnsTokens.set(cacheKey, { jwt, issuedAtS: issuedAt });
    return jwt;
  }

  async send(deviceToken: string, message: VendorMessage): Promise<VendorOutcome> {
    const { data = {}, ...rest } = message;
    const response = await post(`${this.apiBase}/3/device/${encodeURIComponent(deviceToken)}`, {
      headers: {
        authorization: `bearer ${await this.providerToken()}`,
        "apns-topic": this.settings.topic,
        "apns-push-type": "alert",
        "apns-priority": message.priority === "low" ? "5" : "10",
        "apns-expiration": String(nowS() + message.ttlSeconds),
        "content-type": "application/json",
      },
      // Custom keys sit beside `aps`; a key named `aps` in data cannot replace Apple's dictionary.
      body: JSON.stringify({ ...data, aps: { alert: { title: rest.title, ...(rest.body !== undefined ? { body: rest.body } : {}) } } }),
    });
    if (typeof response === "string") return refused(null, `APNs could not be reached: ${response}`);
    if (response.ok) {
      await response.body?.cancel();
      return { accepted: true, httpStatus: response.status, reason: null, tokenGone: false };
    }
    const error = await response.json().catch(() => undefined) as { reason?: string } | undefined;
    const reason = error?.reason ?? String(response.status);
    return { ...refused(response.status, `APNs refused the message: ${reason}`), tokenGone: response.status === 410 || reason === "BadDeviceToken" || reason === "Unregistered" };
  }
}

const refused = (httpStatus: number | null, reason: string): VendorOutcome => ({ accepted: false, httpStatus, reason, tokenGone: false });

// ---- configuration ----------------------------------------------------------------------------

export function fcmSetup(env: Env): VendorSetup {
  if (!env.FCM_SERVICE_ACCOUNT) return { ok: false, reason: "FCM is not configured: set FCM_SERVICE_ACCOUNT to the service account key (JSON)" };
  const account = parseServiceAccount(env.FCM_SERVICE_ACCOUNT);
  if (typeof account === "string") return { ok: false, reason: `FCM is misconfigured: ${account}` };
  return { ok: true, platform: new FcmPlatform(account, testBaseUrl(env.PUSH_TEST_FCM_BASE_URL)) };
}

export function apnsSetup(env: Env): VendorSetup {
  const { APNS_KEY_ID: keyId, APNS_TEAM_ID: teamId, APNS_PRIVATE_KEY: privateKey, APNS_TOPIC: topic } = env;
  const missing = [["APNS_KEY_ID", keyId], ["APNS_TEAM_ID", teamId], ["APNS_PRIVATE_KEY", privateKey], ["APNS_TOPIC", topic]]
    .filter(([, v]) => !v).map(([n]) => n);
  if (missing.length) return { ok: false, reason: `APNs is not configured: set ${missing.join(", ")}` };
  if (!privateKey!.includes("BEGIN PRIVATE KEY")) return { ok: false, reason: "APNs is misconfigured: APNS_PRIVATE_KEY is not the .p8 key (PKCS #8 PEM)" };
  const environment = env.APNS_ENVIRONMENT ?? "production";
  if (environment !== "production" && environment !== "sandbox") return { ok: false, reason: "APNs is misconfigured: APNS_ENVIRONMENT is production or sandbox" };
  return {
    ok: true,
    platform: new ApnsPlatform({ keyId: keyId!, teamId: teamId!, privateKey: privateKey!, topic: topic!, sandbox: environment === "sandbox" }, testBaseUrl(env.PUSH_TEST_APNS_BASE_URL)),
  };
}

export const vendorSetup = (env: Env, id: VendorPlatformId) => (id === "fcm" ? fcmSetup(env) : apnsSetup(env));

/** The vendor platform a device's reported OS points to, for a device that did not name one. */
export function platformForOs(os: string | null | undefined): VendorPlatformId | null {
  if (!os) return null;
  if (/android/i.test(os)) return "fcm";
  if (/\b(ios|ipados|iphone|ipad)\b/i.test(os)) return "apns";
  return null;
}
