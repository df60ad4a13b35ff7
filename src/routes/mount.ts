import type { newRouter } from "../lib/openapi";

export type Router = ReturnType<typeof newRouter>;

/** How a router is being mounted: under its versioned prefix, or under a deprecated alias of it. */
export interface MountOptions {
  /** Under an alias: every operation is documented as deprecated. */
  deprecated: boolean;
}

/** Builds a router once per mount, so the versioned and the alias forms share declarations and handlers. */
export type RouterFactory = (mount: MountOptions) => Router;
