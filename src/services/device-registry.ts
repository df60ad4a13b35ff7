import { and, eq, sql } from "drizzle-orm";
import type { Db } from "../env";
import { auditLogs, devices, lifecycleEpochs } from "../db/schema";
import { conflict, isUniqueViolation } from "../lib/errors";
import { newDeviceId, newUuid, randomToken } from "../shared/ids";
import { auditRow } from "../shared/audit-row";
import { hashSecret } from "./passwords";
import { deviceCreated, rememberIssuedKey } from "./device-auth";

export type EnrollmentMethod = "manual" | "self-enrolled" | "pre-provisioned" | "provisioned";

export interface DeviceRegistrationInput {
  siteId: string;
  deviceId?: string;
  name?: string;
  deviceType?: string;
  ipAddress?: string | null;
  osType?: string | null;
  osVersion?: string | null;
  osDetails?: string | null;
  deviceSource?: "real" | "simulated";
  enrollmentMethod: EnrollmentMethod;
  createdBy?: number | null;
  intentId?: string | null;
}

export interface PreparedRegistration {
  deviceId: string;
  epochId: string;
  /** Plaintext key to show once; undefined for simulated devices, which never call in. */
  apiKey?: string;
  device: typeof devices.$inferInsert;
  epoch: typeof lifecycleEpochs.$inferInsert;
}

/**
 * Builds everything a new device needs — id, one-time api_key (32 random bytes, base64url) with its
 * bcrypt hash, and its first lifecycle epoch — without writing, so callers can put the inserts in
 * the same `db.batch` as their own statements (an enrolment claim must be all or nothing).
 */
export async function prepareRegistration(input: DeviceRegistrationInput): Promise<PreparedRegistration> {
  const deviceId = input.deviceId ?? newDeviceId();
  const source = input.deviceSource ?? "real";
  const apiKey = source === "real" ? randomToken(32) : undefined;
  const epochId = newUuid();
  return {
    deviceId,
    epochId,
    apiKey,
    device: {
      deviceId,
      siteId: input.siteId,
      name: input.name ?? deviceId,
      deviceType: input.deviceType ?? "pos_terminal",
      ipAddress: input.ipAddress ?? null,
      osType: input.osType ?? null,
      osVersion: input.osVersion ?? null,
      osDetails: input.osDetails ?? null,
      apiKeyHash: apiKey ? await hashSecret(apiKey) : null,
      enrollmentMethod: input.enrollmentMethod,
      deviceSource: source,
      status: "offline",
      createdBy: input.createdBy ?? null,
    },
    epoch: {
      epochId,
      deviceId,
      siteId: input.siteId,
      enrollmentMethod: input.enrollmentMethod,
      intentId: input.intentId ?? null,
    },
  };
}

export function registrationStatements(db: Db, prepared: PreparedRegistration, userId?: number | null, request?: Request) {
  return [
    db.insert(devices).values(prepared.device),
    db.insert(lifecycleEpochs).values(prepared.epoch),
    db.insert(auditLogs).values(auditRow({
      eventType: "device_registered",
      description: `Device ${prepared.deviceId} registered (${prepared.device.enrollmentMethod})`,
      userId: userId ?? null,
      siteId: prepared.device.siteId,
      deviceId: prepared.deviceId,
      metadata: {
        enrollment_method: prepared.device.enrollmentMethod,
        device_source: prepared.device.deviceSource,
        epoch_id: prepared.epochId,
        device_type: prepared.device.deviceType,
      },
      request,
    })),
  ] as const;
}

/** Registers a device in one atomic batch; a duplicate device_id is 409. */
export async function registerDevice(db: Db, input: DeviceRegistrationInput, request?: Request) {
  if (input.deviceId) {
    // Ids that differ only in case are the same id to a person reading them off a label.
    const existing = await db.select({ id: devices.id }).from(devices).where(sql`lower(${devices.deviceId}) = lower(${input.deviceId})`).get();
    if (existing) throw conflict(`Device with ID '${input.deviceId}' already exists (device ids are compared regardless of case)`);
  }
  const prepared = await prepareRegistration(input);
  try {
    await db.batch(registrationStatements(db, prepared, input.createdBy, request));
  } catch (error) {
    if (isUniqueViolation(error)) throw conflict(`Device with ID '${prepared.deviceId}' already exists`);
    throw error;
  }
  deviceCreated(prepared.deviceId, prepared.device.siteId);
  if (prepared.apiKey) await rememberIssuedKey(prepared.deviceId, prepared.apiKey, prepared.device.apiKeyHash!);
  return prepared;
}

export const deviceNameTaken = async (db: Db, siteId: string, name: string) =>
  !!(await db.select({ id: devices.id }).from(devices).where(and(eq(devices.siteId, siteId), eq(devices.name, name))).get());
