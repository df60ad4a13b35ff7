/**
 * The Worker's only way into a site's hub. Every method names its site, calls the SiteHub over RPC
 * and parses the reply against the shared contract where it comes back, so a hub that drifts from
 * the contract fails loudly at the boundary instead of leaking an unchecked shape into a response.
 * Refusals (`Outcome` errors) become the API's errors in one place: `unwrap`.
 */
import { z } from "@hono/zod-openapi";
import type { Env } from "../env";
import { ApiError } from "../lib/errors";
import * as contract from "../shared/hub-contract";
import { DEVICE_CHANNEL_HEADER, NOT_ADMITTED_HEADER } from "../shared/device-channel";
import type {
  AgentDevice, CommandReport, DeviceRelease, JobSpec, Outcome, PushInput, QueueInput, Revocation, Sample, SeriesRequest, Sighting, Subscriber,
} from "../shared/hub-contract";
import type { CommandStatus, DiagnosticComponent } from "../shared/vocabulary";
import * as twin from "../shared/twin";

/** A hub refusal as the API's error; Retry-After travels with a 429. */
export function unwrap<T>(outcome: Outcome<T>): T {
  if (outcome.ok) return outcome.value;
  const { status, detail, retryAfterS } = outcome.error;
  if (status === 422) throw new ApiError(422, [{ loc: ["body"], msg: detail, type: "value_error" }]);
  throw new ApiError(status, detail, retryAfterS ? { "Retry-After": String(retryAfterS) } : {});
}

const parse = <S extends z.ZodType>(schema: S, reply: unknown): z.infer<S> => schema.parse(reply);

/** Per site, the last site-health body this isolate checked against the contract (siteHealth). */
const checkedHealthBodies = new Map<string, { head: string; tail: string; health: contract.SiteHealth }>();
/** Per site, the last device list this isolate checked against the contract (siteDevices). */
const checkedDeviceLists = new Map<string, { json: string; body: string }>();
/**
 * Sites whose last checked answer each map keeps; past it, the map starts again. Small, because a
 * 1,000-device site's answer is a few hundred kilobytes and an isolate has 128 MB.
 */
const MAX_CHECKED_SITES = 50;

export class SiteHubClient {
  private readonly stub;

  constructor(env: Env, readonly siteId: string) {
    this.stub = env.SITE_HUB.get(env.SITE_HUB.idFromName(siteId));
  }

  // ---- service ----------------------------------------------------------------------------------

  async ping() {
    return parse(contract.PingSchema, await this.stub.ping());
  }

  // ---- device calls -----------------------------------------------------------------------------

  /** 0 when the device may make one more call, else the seconds it must wait (its budget in the hub). */
  async takeDeviceCallToken(deviceId: string): Promise<number> {
    return (await this.stub.takeDeviceCallToken(this.siteId, deviceId)) as number;
  }

  async admitDevice(deviceId: string, keyDigest: string) {
    return parse(contract.AdmissionSchema, await this.stub.admitDevice(this.siteId, deviceId, keyDigest));
  }

  async confirmDeviceKey(deviceId: string, keyDigest: string, bcryptHash: string) {
    return parse(contract.AdmissionSchema, await this.stub.confirmDeviceKey(this.siteId, deviceId, keyDigest, bcryptHash));
  }

  /** The device's key, lifecycle or settings changed in D1: the hub re-reads them on its next call. */
  async deviceChanged(deviceId: string) {
    await this.stub.deviceChanged(this.siteId, deviceId);
  }

  async heartbeat(keyDigest: string, sighting: Sighting) {
    return parse(contract.HeartbeatReplySchema, await this.stub.heartbeat(this.siteId, keyDigest, sighting));
  }

  async telemetry(keyDigest: string, deviceId: string, samples: Sample[]) {
    return parse(contract.TelemetryReplySchema, await this.stub.telemetry(this.siteId, keyDigest, deviceId, samples));
  }

  /** A slot in the site's hourly bootstrap enrolment quota; 429 with Retry-After when it is used up. */
  async takeEnrolmentSlot(perHour: number) {
    return unwrap(parse(contract.outcomeOf(contract.EnrolmentSlotSchema), await this.stub.takeEnrolmentSlot(this.siteId, perHour)));
  }

  async giveBackEnrolmentSlot(slot: string) {
    await this.stub.giveBackEnrolmentSlot(this.siteId, slot);
  }

  /** A device left the site's live state (suspended, retired or deleted). */
  async forgetDevice(deviceId: string) {
    await this.stub.forgetDevice(this.siteId, deviceId);
  }

  /** The device leaves this site for good: open commands cancelled, live state dropped, and what `drop` names erased. */
  async releaseDevice(deviceId: string, release: DeviceRelease) {
    return parse(contract.ReleasedDeviceSchema, await this.stub.releaseDevice(this.siteId, deviceId, contract.DeviceReleaseSchema.parse(release)));
  }

  /** A device row of the site changed in D1 (registration, settings, DNA): the hub's roster re-reads it. */
  async rosterChanged(deviceId: string) {
    await this.stub.rosterChanged(this.siteId, deviceId);
  }

  /**
   * The site's device list from the hub's roster, with live presence, as the JSON body of an answer:
   * the hub's string checked against the contract, and serialised again from what passed. While the
   * hub sends the very same string (the site unchanged), the body from the last check is answered
   * again, so a 1,000-device list (about 300 kB) is neither checked nor serialised on every read.
   */
  async siteDevicesBody(): Promise<string> {
    const json = parse(z.string(), await this.stub.siteDevicesJson(this.siteId));
    const checked = checkedDeviceLists.get(this.siteId);
    if (checked?.json === json) return checked.body;
    const body = JSON.stringify(parse(contract.RosterDeviceSchema.array(), JSON.parse(json)));
    if (checkedDeviceLists.size >= MAX_CHECKED_SITES) checkedDeviceLists.clear();
    checkedDeviceLists.set(this.siteId, { json, body });
    return body;
  }

  /**
   * Site health, carried as one string rather than an object per device. A body is checked against
   * the contract the first time this isolate sees it; the same body again (the site unchanged, only
   * the time moved on) has passed already.
   */
  async siteHealth(): Promise<contract.SiteHealth> {
    const { head, last_updated, tail } = parse(contract.SiteHealthJsonSchema, await this.stub.siteHealthJson(this.siteId));
    const checked = checkedHealthBodies.get(this.siteId);
    if (checked?.head === head && checked.tail === tail) return { ...checked.health, last_updated };
    const health = parse(contract.SiteHealthSchema, JSON.parse(`${head}${JSON.stringify(last_updated)}${tail}`));
    if (checkedHealthBodies.size >= MAX_CHECKED_SITES) checkedHealthBodies.clear();
    checkedHealthBodies.set(this.siteId, { head, tail, health });
    return health;
  }

  // ---- commands and jobs ------------------------------------------------------------------------

  async queueCommand(input: QueueInput) {
    return unwrap(parse(contract.outcomeOf(contract.QueuedCommandSchema), await this.stub.queueCommand(this.siteId, input)));
  }

  /** One outcome per input, in order: a refused command is reported, never thrown, so the rest still count. */
  async queueCommandBatch(inputs: QueueInput[]) {
    return parse(contract.QueuedBatchSchema, await this.stub.queueCommandBatch(this.siteId, inputs));
  }

  async getCommandBatch(commandIds: string[]) {
    return parse(contract.CommandRecordSchema.array(), await this.stub.getCommandBatch(this.siteId, commandIds));
  }

  async pollCommands(deviceId: string, waitS: number) {
    return unwrap(parse(contract.outcomeOf(contract.CommandRecordSchema.array()), await this.stub.pollCommands(this.siteId, deviceId, waitS)));
  }

  async ackCommand(deviceId: string, commandId: string) {
    return unwrap(parse(contract.outcomeOf(contract.AckBodySchema), await this.stub.ackCommand(this.siteId, deviceId, commandId)));
  }

  async reportCommand(deviceId: string, commandId: string, report: CommandReport) {
    return unwrap(parse(contract.outcomeOf(contract.CommandRecordSchema), await this.stub.reportCommand(this.siteId, deviceId, commandId, report)));
  }

  async getCommand(commandId: string) {
    return parse(contract.CommandRecordSchema.nullable(), await this.stub.getCommand(this.siteId, commandId));
  }

  async listCommands(deviceId: string, query: { status?: CommandStatus; limit: number; offset: number }) {
    return parse(contract.CommandPageSchema, await this.stub.listCommands(this.siteId, deviceId, query));
  }

  async cancelCommand(commandId: string, by: { userId: number | null; reason: string }) {
    return unwrap(parse(contract.outcomeOf(contract.CommandRecordSchema), await this.stub.cancelCommand(this.siteId, commandId, by)));
  }

  /** The cron's safety net: applies lapsed leases, passed TTLs and due simulated results now. */
  async sweepCommands() {
    await this.stub.sweepCommands(this.siteId);
  }

  async scheduleJob(spec: JobSpec) {
    await this.stub.scheduleJob(this.siteId, spec);
  }

  async driveJob(jobId: string) {
    return parse(contract.JobStatusSchema.nullable(), await this.stub.driveJob(this.siteId, jobId));
  }

  async cancelJob(jobId: string, by: { userId: number | null; name: string }) {
    return unwrap(parse(contract.outcomeOf(contract.JobStatusSchema), await this.stub.cancelJob(this.siteId, jobId, by)));
  }

  // ---- agents -----------------------------------------------------------------------------------

  async agent(device: AgentDevice) {
    return parse(contract.AgentSnapshotSchema, await this.stub.agent(this.siteId, device));
  }

  async agentHealth(device: AgentDevice) {
    return parse(contract.AgentHealthReplySchema, await this.stub.agentHealth(this.siteId, device));
  }

  async agentDiagnostics(device: AgentDevice, input: { components: DiagnosticComponent[]; includeLogs: boolean; mode: string }) {
    return parse(contract.DiagnosticsReplySchema, await this.stub.agentDiagnostics(this.siteId, device, input));
  }

  async restartAgent(device: AgentDevice, reason: string | null) {
    return parse(contract.RestartReplySchema, await this.stub.restartAgent(this.siteId, device, reason));
  }

  async pushToAgent(device: AgentDevice, push: PushInput, requestedBy: string | null) {
    return unwrap(parse(contract.outcomeOf(contract.PushResultSchema), await this.stub.pushToAgent(this.siteId, device, push, requestedBy)));
  }

  async agentSeries(device: AgentDevice, request: SeriesRequest) {
    return parse(contract.SeriesReplySchema, await this.stub.agentSeries(this.siteId, device, request));
  }

  // ---- device channel ---------------------------------------------------------------------------

  /**
   * Hands a device's WebSocket upgrade to the hub, which admits the key digest first: the answer is
   * the hub's 101 (or another refusal of the upgrade itself), or, when the key is not admitted yet,
   * the admission to act on (bcrypt, 401, 403) as for any device call.
   */
  async openDeviceChannel(deviceId: string, keyDigest: string, upgrade: string | undefined): Promise<Response | contract.NotAdmitted> {
    const url = new URL("https://site-hub.internal/device-channel");
    url.searchParams.set("site_id", this.siteId);
    const headers = new Headers({ [DEVICE_CHANNEL_HEADER]: JSON.stringify({ device_id: deviceId, key_digest: keyDigest }) });
    if (upgrade) headers.set("Upgrade", upgrade);
    const response = await this.stub.fetch(new Request(url, { headers }));
    if (response.headers.get(NOT_ADMITTED_HEADER)) return contract.NotAdmittedSchema.parse(await response.json());
    return response;
  }

  /** Devices with an open channel socket on this site. */
  async channelDevices() {
    return parse(z.array(z.string()), await this.stub.channelDevices(this.siteId));
  }

  // ---- the assistant ----------------------------------------------------------------------------

  /** The site's devices with a current anomaly score of at least `minScore`, computed in the hub. */
  async aiAnomalies(minScore: number) {
    return parse(contract.DeviceAnomalySchema.array(), await this.stub.aiAnomalies(this.siteId, minScore));
  }

  /** The site's devices with a failure risk of at least `minRisk` over `windowMs`, computed in the hub. */
  async aiRisks(minRisk: number, windowMs: number) {
    return parse(contract.DeviceRiskSummarySchema.array(), await this.stub.aiRisks(this.siteId, minRisk, windowMs));
  }

  /** Values scored against the device's own baseline (or its site peers'), in the hub. */
  async aiScoreValues(deviceId: string, values: z.infer<typeof contract.AiMetricValuesSchema>) {
    return parse(contract.AnomalyAssessmentSchema, await this.stub.aiScoreValues(this.siteId, deviceId, contract.AiMetricValuesSchema.parse(values)));
  }

  /** One device's risk over `windowMs`, its anomaly and last events, computed in the hub. */
  async aiDeviceAssessment(device: AgentDevice, windowMs: number, eventLimit: number) {
    return parse(contract.DeviceAssessmentSchema, await this.stub.aiDeviceAssessment(this.siteId, device, windowMs, eventLimit));
  }

  // ---- live channel -----------------------------------------------------------------------------

  async publish(type: string, data: unknown) {
    return parse(contract.LiveEventSchema, await this.stub.publish(this.siteId, type, data));
  }

  async channelHead() {
    return parse(contract.ChannelHeadSchema, await this.stub.liveHead(this.siteId));
  }

  async subscribers() {
    return parse(contract.SubscribersSchema, await this.stub.subscribers(this.siteId));
  }

  /** Closes (role null) or downgrades the user's open subscriptions on this site. */
  async revokeSubscriber(revocation: Revocation) {
    return parse(contract.RevocationResultSchema, await this.stub.revokeSubscriber(this.siteId, contract.RevocationSchema.parse(revocation)));
  }

  /**
   * Hands an authorised subscription to the hub: `ws` (the request must carry the WebSocket upgrade)
   * or `events` (server-sent events). The hub replays from `since` and then streams, or answers 429
   * when the user or the site already has as many subscriptions as it allows.
   */
  async subscribe(channel: "ws" | "events", subscriber: Omit<Subscriber, "channel">, since: number | undefined, upgrade?: string): Promise<Response> {
    const url = new URL(`https://site-hub.internal/${channel}`);
    url.searchParams.set("site_id", this.siteId);
    if (since !== undefined) url.searchParams.set("since", String(since));
    const headers = new Headers({ [contract.SUBSCRIBER_HEADER]: JSON.stringify(subscriber) });
    if (upgrade) headers.set("Upgrade", upgrade);
    return this.stub.fetch(new Request(url, { headers }));
  }

  // ---- device twins (docs/twins.md) ---------------------------------------------------------------

  /** The device's twin; undefined when the device is not on this site. */
  async twin(deviceId: string) {
    return parse(twin.TwinStateSchema.optional(), await this.stub.twin(this.siteId, deviceId));
  }

  /** An operator's merge patch, taken only at version `ifMatch` (412 otherwise); undefined for a device not here. */
  async patchTwinDesired(deviceId: string, ifMatch: number, patch: twin.JsonObject) {
    const reply = parse(contract.outcomeOf(twin.DesiredPatchResultSchema).optional(), await this.stub.patchTwinDesired(this.siteId, deviceId, ifMatch, patch));
    return reply && unwrap(reply);
  }

  async patchTwinReported(deviceId: string, patch: twin.JsonObject) {
    const schema = z.object({ twin: twin.TwinStateSchema, in_sync_changed: z.boolean() });
    const reply = parse(contract.outcomeOf(schema).optional(), await this.stub.patchTwinReported(this.siteId, deviceId, patch));
    return reply && unwrap(reply);
  }

  /** The site's whole template set and its devices: one call recomputes them all in the hub. */
  async setTwinTemplates(templates: twin.TwinTemplateSet, devices: twin.TwinDeviceSeed[]) {
    return parse(z.array(twin.TwinSyncChangeSchema), await this.stub.setTwinTemplates(this.siteId, templates, devices));
  }

  async twinDrift() {
    return parse(z.array(twin.TwinDriftSchema), await this.stub.twinDrift(this.siteId));
  }
}

export const siteHub = (env: Env, siteId: string) => new SiteHubClient(env, siteId);
