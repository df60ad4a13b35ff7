import { describe, expect, it } from "vitest";
import { call, signup } from "./helpers";

describe("smoke", () => {
  it("serves the banner and signs up", async () => {
    const res = await call("/");
    expect(res.status).toBe(200);
    expect(res.json.message).toContain("Fleet Edge");
    const user = await signup();
    const me = await call("/api/v1/auth/me", { token: user.token });
    expect(me.status).toBe(200);
    expect(me.json.data.email).toBe(user.email);
  });
});
