import { describe, expect, it } from "vitest";
import { call, grantSiteRole, signup } from "./helpers";
import { openStream } from "./live-helpers";
import { createRollout, installFleetClock, installOrchestratorClock, orchestrator, progressOf, runFleet, simulatedFleet } from "./rollouts-helpers";
import { RolloutProgressSchema, type RolloutProgress } from "../../src/shared/rollout-contract";

const finished = (p: { status: string }) => p.status === "completed" || p.status === "aborted";
const eventsPath = (rolloutId: string) => `/api/v1/rollouts/${rolloutId}/events`;

/** Every `id:` frame so far, its data parsed against the progress schema. */
const framesOf = (text: string) => text.split("\n\n").filter((f) => f.startsWith("id: ")).map((f) => {
  const [idLine, dataLine] = f.split("\n");
  return { id: Number(idLine.slice(4)), progress: RolloutProgressSchema.parse(JSON.parse(dataLine.slice(6))) as RolloutProgress };
});

const streamCount = (rolloutId: string) => orchestrator(rolloutId).streamCount();

describe("rollout progress stream", () => {
  it("sends a snapshot, then every change, and ends after the final snapshot; a reconnect with that id gets 204", { timeout: 120_000 }, async () => {
    const owner = await signup();
    const { siteIds } = await simulatedFleet(owner.token, 2, 3);
    const clock = await installFleetClock(siteIds);
    const res = await createRollout(owner.token, {
      name: "Config 3", site_ids: siteIds, action: "update_config", payload: { config_version: "3.0.0" },
      waves: { canary_percent: 34, growth: 2, soak_seconds: 10 }, budget: { max_devices_per_site: 1 },
    });
    expect(res.status, res.text).toBe(201);
    const rolloutId = res.json.rollout_id as string;
    await installOrchestratorClock(rolloutId, clock);

    const opened = await openStream(eventsPath(rolloutId), { token: owner.token, headers: { Accept: "text/event-stream" } });
    expect(opened.status).toBe(200);
    expect(opened.headers.get("Content-Type")).toMatch(/^text\/event-stream/);
    const stream = opened.stream!;
    await stream.until(() => framesOf(stream.text()).length >= 1, "the snapshot");
    expect(stream.text()).toMatch(/^retry: 3000\n\n/);
    const [snapshot] = framesOf(stream.text());
    expect(snapshot.progress).toEqual(await progressOf(rolloutId));
    expect(await streamCount(rolloutId)).toBe(1);

    const done = await runFleet(rolloutId, siteIds, clock, finished);
    expect(done.status).toBe("completed");
    await stream.waitForEnd();
    const frames = framesOf(stream.text());
    // One frame per change: more than the snapshot, ids growing by one, no two alike in a row.
    expect(frames.length).toBeGreaterThan(3);
    frames.forEach((f, i) => expect(f.id).toBe(snapshot.id + i));
    for (let i = 1; i < frames.length; i++) expect(frames[i].progress).not.toEqual(frames[i - 1].progress);
    expect(frames.some((f) => f.progress.status === "running")).toBe(true);
    expect(frames.at(-1)!.progress).toEqual(done);
    expect(await streamCount(rolloutId)).toBe(0);

    // EventSource reconnects after the end: with the final id it is told there is nothing more.
    const last = frames.at(-1)!.id;
    const again = await call(eventsPath(rolloutId), { token: owner.token, headers: { "Last-Event-ID": String(last) } });
    expect(again.status).toBe(204);
    // With an older id (or none) it gets the final snapshot again, and the stream ends.
    const behind = (await openStream(eventsPath(rolloutId), { token: owner.token, headers: { "Last-Event-ID": String(last - 1) } })).stream!;
    await behind.waitForEnd();
    expect(framesOf(behind.text())).toEqual([{ id: last, progress: done }]);
  });

  it("is for anyone with a role on one of its sites (else 404), refuses a bad Last-Event-ID, and ends when the viewer loses access", { timeout: 60_000 }, async () => {
    const owner = await signup();
    const viewer = await signup();
    const stranger = await signup();
    const { siteIds } = await simulatedFleet(owner.token, 1, 2);
    await grantSiteRole(owner.token, siteIds[0], viewer, "viewer");
    const res = await createRollout(owner.token, { name: "Restart", site_ids: siteIds, action: "restart", waves: { canary_percent: 50, soak_seconds: 600 } });
    expect(res.status, res.text).toBe(201);
    const rolloutId = res.json.rollout_id as string;
    expect((await call(`/api/v1/rollouts/${rolloutId}/pause`, { method: "POST", token: owner.token })).status).toBe(200);

    expect((await call(eventsPath(rolloutId), { token: stranger.token })).status).toBe(404);
    expect((await call(eventsPath("rol-000000000000"), { token: owner.token })).status).toBe(404);
    expect((await call(eventsPath(rolloutId))).status).toBe(401);
    const bad = await call(eventsPath(rolloutId), { token: owner.token, headers: { "Last-Event-ID": "soon" } });
    expect(bad.status).toBe(422);

    const viewerStream = (await openStream(eventsPath(rolloutId), { token: viewer.token })).stream!;
    const ownerStream = (await openStream(eventsPath(rolloutId), { token: owner.token })).stream!;
    await viewerStream.until(() => framesOf(viewerStream.text()).length >= 1, "the viewer's snapshot");
    expect(framesOf(viewerStream.text())[0].progress.status).toBe("paused");
    expect(await streamCount(rolloutId)).toBe(2);

    const viewerId = (await call("/api/v1/auth/me", { token: viewer.token })).json.data.id as number;
    expect((await call(`/api/v1/sites/${siteIds[0]}/members/${viewerId}`, { method: "DELETE", token: owner.token })).status).toBe(200);
    await viewerStream.waitForEnd();
    expect(viewerStream.text()).toContain(": access revoked");
    expect(ownerStream.ended()).toBe(false);
    expect(await streamCount(rolloutId)).toBe(1);
    expect((await call(eventsPath(rolloutId), { token: viewer.token })).status).toBe(404);

    // The owner's stream goes on with the next change.
    expect((await call(`/api/v1/rollouts/${rolloutId}/resume`, { method: "POST", token: owner.token })).status).toBe(200);
    await ownerStream.until(() => framesOf(ownerStream.text()).some((f) => f.progress.status !== "paused"), "the resumed progress");
  });
});
