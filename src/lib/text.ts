import { z } from "@hono/zod-openapi";

// Control characters are never part of a name: NUL truncates strings in C-based tools, ESC and CSI
// (C1) drive terminals that show logs, and line breaks forge lines in logs and CSV exports.
// C0 (U+0000–U+001F), DEL (U+007F) and C1 (U+0080–U+009F):
const NO_CONTROL = /^[^\u0000-\u001f\u007f-\u009f]*$/;
// The same without tab, line feed and carriage return, which prose may hold:
const NO_CONTROL_BUT_LINE_BREAKS = /^[^\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]*$/;

/**
 * A name or identifier typed by a person or sent by a device (site, device, user, job and tenant
 * names, identities, keys, tokens). Letters of every script are welcome; control characters are
 * not. Checked before any trim, so a trailing line break is refused rather than quietly removed.
 */
export const lineText = () => z.string().regex(NO_CONTROL, "Control characters (U+0000–U+001F, U+007F–U+009F) are not allowed");

/** Free text (descriptions, messages, reasons): tabs and line breaks allowed, other control characters not. */
export const proseText = () =>
  z.string().regex(NO_CONTROL_BUT_LINE_BREAKS, "Control characters other than tab, line feed and carriage return are not allowed");
