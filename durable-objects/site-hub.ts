import { DurableObject } from "cloudflare:workers";
import type { Env } from "../src/env";

/** One per site: live presence, command queue, jobs, simulated agents and fan-out. */
export class SiteHub extends DurableObject<Env> {
  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
  }
}
