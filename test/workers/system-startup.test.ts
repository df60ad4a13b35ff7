import { describe, expect, it } from "vitest";
import { eq } from "drizzle-orm";
import * as schema from "../../src/db/schema";
import { COMPONENTS, SERVICE_VERSION, recordVersion } from "../../src/services/system";
import pkg from "../../package.json";
import { call, db, eventually, unique } from "./helpers";

type Meta = { version?: string; components?: string[]; reason?: string; superseded_by?: string };

const events = async (type: "system_startup" | "system_shutdown", version: string) =>
  (await db().select().from(schema.auditLogs).where(eq(schema.auditLogs.eventType, type)).all())
    .filter((e) => (e.eventMetadata as Meta).version === version);

const versionRow = (version: string) =>
  db().select().from(schema.serviceVersions).where(eq(schema.serviceVersions.version, version)).get();

describe("system_startup / system_shutdown", () => {
  it("the service version comes from package.json", () => {
    expect(SERVICE_VERSION).toBe(pkg.version);
  });

  it("the first requests record the serving version once", async () => {
    await Promise.all(Array.from({ length: 20 }, () => call("/version")));
    await eventually(() => versionRow(SERVICE_VERSION));
    const startup = await eventually(async () => (await events("system_startup", SERVICE_VERSION)).length > 0 && events("system_startup", SERVICE_VERSION));
    expect(startup).toHaveLength(1);
    expect(startup[0]).toMatchObject({ category: "system_events", severity: "info", userId: null, siteId: null });
    expect(startup[0].eventMetadata).toEqual({ version: SERVICE_VERSION, components: COMPONENTS });
    await Promise.all(Array.from({ length: 5 }, () => call("/")));
    expect(await events("system_startup", SERVICE_VERSION)).toHaveLength(1);
  });

  it("records startup once and the superseded version's shutdown once under concurrent first calls", async () => {
    const old = unique("1.0.0-old.");
    const next = unique("2.0.0-new.");
    await db().insert(schema.serviceVersions).values({ version: old });
    const results = await Promise.all(Array.from({ length: 12 }, () => recordVersion(db(), next)));
    expect(results.filter(Boolean)).toHaveLength(1);

    const startup = await events("system_startup", next);
    expect(startup).toHaveLength(1);
    expect(startup[0]).toMatchObject({ category: "system_events", severity: "info" });
    expect(startup[0].eventMetadata).toEqual({ version: next, components: COMPONENTS });

    const shutdown = await events("system_shutdown", old);
    expect(shutdown).toHaveLength(1);
    expect(shutdown[0]).toMatchObject({ category: "system_events" });
    expect(shutdown[0].eventMetadata).toEqual({ version: old, reason: "superseded", superseded_by: next });
    expect((await versionRow(old))?.supersededAt).toMatch(/Z$/);
    expect((await versionRow(next))?.supersededAt).toBeNull();

    // Serving the same version again later records nothing.
    expect(await recordVersion(db(), next)).toBe(false);
    expect(await events("system_startup", next)).toHaveLength(1);
    expect(await events("system_shutdown", old)).toHaveLength(1);
  });

  it("a later version supersedes only the current one", async () => {
    const first = unique("3.0.0-a.");
    const second = unique("3.0.0-b.");
    const third = unique("3.0.0-c.");
    await recordVersion(db(), first);
    await recordVersion(db(), second);
    await Promise.all([recordVersion(db(), third), recordVersion(db(), third), recordVersion(db(), third)]);
    expect(await events("system_shutdown", first)).toHaveLength(1);
    expect((await events("system_shutdown", first))[0].eventMetadata).toMatchObject({ superseded_by: second });
    expect(await events("system_shutdown", second)).toHaveLength(1);
    expect((await events("system_shutdown", second))[0].eventMetadata).toMatchObject({ superseded_by: third });
    expect(await events("system_shutdown", third)).toHaveLength(0);
    expect(await events("system_startup", third)).toHaveLength(1);
  });
});
