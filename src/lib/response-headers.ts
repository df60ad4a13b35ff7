import type { Context } from "hono";

/**
 * Edits the headers of the answer a handler has already produced, in place. Hono's `c.header()`
 * copies the whole Response for every header set after that point. Those copies die young, but workerd
 * destroys their headers only after the next garbage collection, all at once: with the dozen headers
 * every answer gets, that clean-up stalled the isolate for 30–50 ms about once a second under load
 * (README, "Site reads"). A Response whose headers cannot change (one returned by `fetch`) is copied
 * once, here, and edited after that.
 */
export function editResponseHeaders(c: Context, edit: (headers: Headers) => void): void {
  try {
    edit(c.res.headers);
  } catch (error) {
    if (!(error instanceof TypeError)) throw error;
    const copy = new Response(c.res.body, c.res);
    edit(copy.headers);
    // Cleared first: assigning over an existing answer makes Hono merge the old headers back in.
    c.res = undefined;
    c.res = copy;
  }
}
