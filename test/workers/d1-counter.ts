/**
 * A D1 binding that counts the statements the Worker sends through it (each `first`/`all`/`raw`/`run`
 * of a prepared statement, each `batch` as one round trip with its statements), so a test can hold a
 * route to the D1 queries it is allowed.
 */
export interface CountingD1 {
  binding: D1Database;
  /** SQL of every statement sent, in order. */
  statements: string[];
  /** Round trips: a batch is one. */
  roundTrips: number;
}

const SENDS = new Set(["first", "all", "raw", "run"]);

export function countingD1(real: D1Database): CountingD1 {
  const counter: CountingD1 = { binding: real, statements: [], roundTrips: 0 };
  const originals = new WeakMap<object, D1PreparedStatement>();
  const wrapStatement = (statement: D1PreparedStatement, sql: string): D1PreparedStatement => {
    const wrapped = new Proxy(statement, {
      get(target, property, receiver) {
        const value = Reflect.get(target, property, receiver);
        if (typeof value !== "function") return value;
        if (property === "bind") return (...params: unknown[]) => wrapStatement(target.bind(...params), sql);
        if (SENDS.has(String(property))) {
          return (...args: unknown[]) => {
            counter.statements.push(sql);
            counter.roundTrips++;
            return value.apply(target, args);
          };
        }
        return value.bind(target);
      },
    });
    originals.set(wrapped, statement);
    return wrapped;
  };
  counter.binding = new Proxy(real, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (property === "prepare") return (sql: string) => wrapStatement(target.prepare(sql), sql);
      if (property === "batch") {
        return (statements: D1PreparedStatement[]) => {
          counter.roundTrips++;
          counter.statements.push(`batch of ${statements.length}`);
          return target.batch(statements.map((s) => originals.get(s) ?? s));
        };
      }
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return counter;
}
