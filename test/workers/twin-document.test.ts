import { describe, expect, it } from "vitest";
import {
  TWIN_MAX_BYTES, changedKeys, documentProblems, layerDocuments, mergePatch, twinDelta, type JsonObject,
} from "../../src/shared/twin";

describe("twin documents: JSON merge patch (RFC 7396)", () => {
  it("merges nested objects, deletes with null, replaces arrays and scalars", () => {
    const target: JsonObject = { display: { brightness: 50, theme: "dark" }, printers: ["a", "b"], locale: "en" };
    const patched = mergePatch(target, { display: { brightness: 80, theme: null }, printers: ["c"], locale: null, volume: 3 });
    expect(patched).toEqual({ display: { brightness: 80 }, printers: ["c"], volume: 3 });
    // The target is not modified.
    expect(target).toEqual({ display: { brightness: 50, theme: "dark" }, printers: ["a", "b"], locale: "en" });
  });

  it("follows the RFC's examples", () => {
    expect(mergePatch({ a: "b" }, { a: "c" })).toEqual({ a: "c" });
    expect(mergePatch({ a: "b" }, { b: "c" })).toEqual({ a: "b", b: "c" });
    expect(mergePatch({ a: "b" }, { a: null })).toEqual({});
    expect(mergePatch({ a: [{ b: "c" }] }, { a: [1] })).toEqual({ a: [1] });
    expect(mergePatch({ e: null }, { a: 1 })).toEqual({ e: null, a: 1 });
    expect(mergePatch({ a: "foo" }, { a: { bb: { ccc: null } } })).toEqual({ a: { bb: {} } });
    expect(mergePatch({ a: { b: "c" } }, { a: { b: "d", c: null } })).toEqual({ a: { b: "d" } });
  });
});

describe("twin documents: delta and changed keys", () => {
  it("lists desired values the report lacks, recursively, ignoring keys nobody desires", () => {
    const desired: JsonObject = { display: { brightness: 80, theme: "dark" }, printers: ["a"], volume: 3 };
    const reported: JsonObject = { display: { brightness: 80, theme: "light" }, printers: ["a", "b"], volume: 3, uptime: 10 };
    expect(twinDelta(desired, reported)).toEqual({ display: { theme: "dark" }, printers: ["a"] });
    expect(twinDelta(desired, { ...reported, display: { theme: "dark", brightness: 80 }, printers: ["a"] })).toEqual({});
    expect(twinDelta({ a: { b: 1 } }, { a: 5 })).toEqual({ a: { b: 1 } });
  });

  it("names the top-level keys that differ", () => {
    expect(changedKeys({ a: 1, b: { c: 1 }, d: 1 }, { a: 1, b: { c: 2 }, e: 1 })).toEqual(["b", "d", "e"]);
    expect(changedKeys({ a: { x: 1, y: 2 } }, { a: { y: 2, x: 1 } })).toEqual([]);
  });
});

describe("twin documents: layering", () => {
  it("puts the device over the site over the segment, and says where each leaf came from", () => {
    const { effective, sources } = layerDocuments([
      { source: "segment:pos_terminal", document: { display: { brightness: 40, theme: "dark" }, printer: "thermal", locale: "en" } },
      { source: "site", document: { display: { brightness: 60 }, locale: "fr" } },
      { source: "device", document: { display: { theme: "light" }, printer: { model: "x" } } },
    ]);
    expect(effective).toEqual({ display: { brightness: 60, theme: "light" }, printer: { model: "x" }, locale: "fr" });
    expect(sources).toEqual({
      "/display/brightness": "site", "/display/theme": "device", "/printer/model": "device", "/locale": "site",
    });
  });

  it("lets a scalar replace an object from a lower layer", () => {
    const { effective, sources } = layerDocuments([
      { source: "site", document: { net: { dns: "1.1.1.1", ntp: "pool" } } },
      { source: "device", document: { net: "offline" } },
    ]);
    expect(effective).toEqual({ net: "offline" });
    expect(sources).toEqual({ "/net": "device" });
  });
});

describe("twin documents: limits", () => {
  it("refuses what is not an object, too deep, or a bad key; flags what is too large", () => {
    expect(documentProblems([1], { allowNull: true }).problems).toHaveLength(1);
    let deep: JsonObject = { leaf: 1 };
    for (let i = 0; i < 8; i++) deep = { level: deep };
    expect(documentProblems(deep, { allowNull: false }).problems[0].msg).toMatch(/deeper than 8/);
    let ok: JsonObject = { leaf: 1 };
    for (let i = 0; i < 6; i++) ok = { level: ok };
    expect(documentProblems(ok, { allowNull: false }).problems).toEqual([]);
    expect(documentProblems({ "bad key": 1, $set: 2, "": 3 }, { allowNull: false }).problems.map((p) => p.path)).toEqual([["bad key"], ["$set"], [""]]);
    expect(documentProblems({ a: null }, { allowNull: false }).problems).toHaveLength(1);
    expect(documentProblems({ a: null }, { allowNull: true }).problems).toEqual([]);
    expect(documentProblems({ a: "x".repeat(TWIN_MAX_BYTES) }, { allowNull: false })).toEqual({ tooLarge: true, problems: [] });
  });
});
