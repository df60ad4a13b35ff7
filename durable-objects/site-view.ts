import type { RosterDevice, SiteHealth, SiteHealthJson } from "../src/shared/hub-contract";

/**
 * The site's device list and health as last worked out, reused until the hub's storage changes. A
 * dashboard reads them far more often than devices change, and working them out walks every device
 * of the site; reusing them makes a read cost the same at 1,000 devices as at 10.
 */
export interface SiteView {
  /** The hub's write count when the view was worked out (see countWrites). */
  writes: number;
  devices: RosterDevice[];
  /** Worked out on the first health read of this view; `last_updated` is set on every answer. */
  health?: SiteHealth;
  /** `devices` serialised, made on the first read that asks for it. */
  devicesJson?: string;
  /** The same, serialised around its `last_updated` (serialiseHealth). */
  healthJson?: Omit<SiteHealthJson, "last_updated">;
}

/** Site health as JSON split around the value of `last_updated`, which each answer fills in. */
export function serialiseHealth(health: SiteHealth): Omit<SiteHealthJson, "last_updated"> {
  const mark = "\u0000last_updated\u0000";
  const json = JSON.stringify({ ...health, last_updated: mark });
  // The last occurrence: a device's name may hold the mark too, and every device comes before last_updated.
  const at = json.lastIndexOf(JSON.stringify(mark));
  return { head: json.slice(0, at), tail: json.slice(at + JSON.stringify(mark).length) };
}

const READ_ONLY_STATEMENT = /^\s*SELECT\b/i;

/**
 * The hub's SQLite with every statement that is not a plain SELECT counted as a write. A view worked
 * out at one count is current while the count has not moved: roster, presence, twins and agents all
 * live in this storage, so none of them can change without a write here.
 */
export function countWrites(sql: SqlStorage, onWrite: () => void): SqlStorage {
  return {
    exec: (query: string, ...bindings: unknown[]) => {
      if (!READ_ONLY_STATEMENT.test(query)) onWrite();
      return sql.exec(query, ...bindings);
    },
    get databaseSize() {
      return sql.databaseSize;
    },
    Cursor: sql.Cursor,
    Statement: sql.Statement,
  };
}
