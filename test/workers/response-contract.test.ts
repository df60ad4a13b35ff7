import { describe, expect, it } from "vitest";
import { assertContract, contractProblems, findOperation } from "./response-contract";

const json = "application/json";
const site = { site_id: "STORE-1", name: "Store", description: null, location: null, created_at: "2026-01-01T00:00:00.000Z" };

describe("the response contract check", () => {
  it("finds the declared operation for concrete paths, the first registered winning", () => {
    expect(findOperation("GET", "/api/v1/sites/sites")?.path).toBe("/api/v1/sites/sites");
    expect(findOperation("GET", "/api/v1/sites/sites/")?.path).toBe("/api/v1/sites/sites");
    expect(findOperation("GET", "/api/v1/sites/STORE-1?x=1")?.path).toBe("/api/v1/sites/{site_id}");
    // `/devices/pending` is mounted before the registry's `/devices/{device_id}`.
    expect(findOperation("GET", "/api/v1/devices/pending")?.path).toBe("/api/v1/devices/pending");
    expect(findOperation("GET", "/api/v1/devices/POS-1")?.path).toBe("/api/v1/devices/{device_id}");
    expect(findOperation("DELETE", "/version")).toBeUndefined();
  });

  it("accepts a body that matches the declared schema", () => {
    expect(contractProblems("GET", "/api/v1/sites/sites", { status: 200, contentType: json, json: { sites: [site] } })).toEqual([]);
    expect(contractProblems("GET", "/api/v1/sites/sites", { status: 401, contentType: json, json: { detail: "Not authenticated" } })).toEqual([]);
  });

  it("fails a body with a wrong type, a missing field or an undeclared field", () => {
    const wrongType = contractProblems("GET", "/api/v1/sites/sites", { status: 200, contentType: json, json: { sites: [{ ...site, name: 42 }] } });
    expect(wrongType).toEqual([expect.stringContaining("body.sites.0.name")]);
    const { created_at: _, ...missing } = site;
    expect(contractProblems("GET", "/api/v1/sites/sites", { status: 200, contentType: json, json: { sites: [missing] } }))
      .toEqual([expect.stringContaining("body.sites.0.created_at")]);
    expect(contractProblems("GET", "/api/v1/sites/sites", { status: 200, contentType: json, json: { sites: [{ ...site, secret: "x" }] } }))
      .toEqual([expect.stringContaining("body.sites[0].secret is not declared")]);
    expect(() => assertContract("GET", "/version", { status: 200, contentType: json, json: { version: 1 } })).toThrow(/does not match/);
  });

  it("fails an error body that is not the shared error shape", () => {
    expect(contractProblems("GET", "/api/v1/sites/sites", { status: 401, contentType: json, json: { error: "nope" } })).not.toEqual([]);
    expect(contractProblems("GET", "/no/such/route", { status: 404, contentType: json, json: { detail: "Not Found" } })).toEqual([]);
    expect(contractProblems("GET", "/no/such/route", { status: 404, contentType: json, json: { message: "Not Found" } })).not.toEqual([]);
  });

  it("fails a status the operation does not declare", () => {
    expect(contractProblems("GET", "/version", { status: 409, contentType: json, json: { detail: "x" } }))
      .toEqual([expect.stringMatching(/status 409 is not declared/)]);
    // Declared statuses of non-JSON answers pass on their status alone.
    expect(contractProblems("GET", "/docs", { status: 200, contentType: "text/html" })).toEqual([]);
    expect(contractProblems("GET", "/docs", { status: 500, contentType: "text/html" })).not.toEqual([]);
  });
});
