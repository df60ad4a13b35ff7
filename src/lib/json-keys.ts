/** Where a value sits in a JSON document: object keys and array indexes from the root. */
export type JsonPath = (string | number)[];

/** An object or array being read, and where in it the reader is. */
type Container =
  | { keys: Set<string>; key: string; expectingKey: boolean }
  | { index: number };

const position = (c: Container) => ("keys" in c ? c.key : c.index);

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
      if (top && "keys" in top && top.expectingKey) {
        const literal = text.slice(i, end + 1);
        const key: string = literal.includes("\\") ? JSON.parse(literal) : literal.slice(1, -1);
        if (top.keys.has(key)) return [...open.slice(0, -1).map(position), key];
        top.keys.add(key);
        top.key = key;
        top.expectingKey = false;
      }
      i = end;
    } else if (c === "{") {
      open.push({ keys: new Set(), key: "", expectingKey: true });
    } else if (c === "[") {
      open.push({ index: 0 });
    } else if (c === "}" || c === "]") {
      open.pop();
    } else if (c === ",") {
      const top = open[open.length - 1];
      if (top && "keys" in top) top.expectingKey = true;
      else if (top) top.index++;
    }
  }
  return undefined;
}

/** `body.a[2].b` style, for error messages. */
export const formatJsonPath = (path: JsonPath) =>
  path.reduce<string>((out, part) => (typeof part === "number" ? `${out}[${part}]` : `${out}.${part}`), "body");
