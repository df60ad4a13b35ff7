/** Where a value sits in a JSON document: object keys and array indexes from the root. */
export type JsonPath = (string | number)[];

interface Container {
  /** Keys seen so far in an object; null for an array. */
  keys: Set<string> | null;
  /** The key or index of the value being read in this container. */
  at: string | number;
  expectingKey: boolean;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** Index of the quote that closes the string opened at `start`. */
function closingQuote(text: string, start: number): number {
  let i = start + 1;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === BACKSLASH) i += 2;
    else if (c === QUOTE) return i;
    else i++;
  }
  return text.length - 1;
}

/**
 * The path of the first key that occurs twice in one object of `text`, or undefined when there is
 * none. `JSON.parse` keeps the last of duplicate keys silently, so a body could say one thing to a
 * reader that keeps the first and another to us. Keys are compared after unescaping (`"a"` and
 * `"\u0061"` are the same key). `text` must already be valid JSON: the scanner checks nothing else.
 */
export function findDuplicateKey(text: string): JsonPath | undefined {
  const open: Container[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      const end = closingQuote(text, i);
      const top = open[open.length - 1];
      if (top?.keys && top.expectingKey) {
        const literal = text.slice(i, end + 1);
        const key: string = literal.includes("\\") ? JSON.parse(literal) : literal.slice(1, -1);
        if (top.keys.has(key)) return [...open.slice(0, -1).map((o) => o.at), key];
        top.keys.add(key);
        top.at = key;
        top.expectingKey = false;
      }
      i = end;
    } else if (c === "{") {
      open.push({ keys: new Set(), at: "", expectingKey: true });
    } else if (c === "[") {
      open.push({ keys: null, at: 0, expectingKey: false });
    } else if (c === "}" || c === "]") {
      open.pop();
    } else if (c === ",") {
      const top = open[open.length - 1];
      if (top?.keys) top.expectingKey = true;
      else if (top) top.at = (top.at as number) + 1;
    }
  }
  return undefined;
}

/** `body.a[2].b` style, for error messages. */
export const formatJsonPath = (path: JsonPath) =>
  path.reduce<string>((out, part) => (typeof part === "number" ? `${out}[${part}]` : `${out}.${part}`), "body");
