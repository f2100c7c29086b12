/**
 * Names as a container wrote them (bytes, not necessarily UTF-8) made into text that shows what
 * they are wherever it is printed: a terminal, a page, a Markdown data sheet.
 */
const utf8 = new TextDecoder("utf-8", { fatal: true });
const hex = (b: number) => `\\x${b.toString(16).padStart(2, "0")}`;
const SHORT_ESCAPES: Record<number, string> = { 9: "\\t", 10: "\\n", 13: "\\r", 92: "\\\\" };

/**
 * A name's bytes as text a terminal or a page shows as what it is: UTF-8 kept, a backslash
 * doubled, control bytes and bytes that are not UTF-8 as \xNN, and the characters that reorder or
 * break lines when shown (bidirectional controls, line and paragraph separators) as \u{…}.
 */
export function escapeName(bytes: Buffer): { text: string; escaped: boolean } {
  let text = "";
  let escaped = false;
  let i = 0;
  while (i < bytes.length) {
    const b = bytes[i] as number;
    if (b < 0x80) {
      const short = SHORT_ESCAPES[b];
      if (short) {
        text += short;
        escaped = true;
      } else if (b < 0x20 || b === 0x7f) {
        text += hex(b);
        escaped = true;
      } else text += String.fromCharCode(b);
      i++;
      continue;
    }
    const len = b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
    let ch: string | null = null;
    if (len && i + len <= bytes.length) {
      try {
        ch = utf8.decode(bytes.subarray(i, i + len));
      } catch {
        ch = null;
      }
    }
    if (ch === null) {
      text += hex(b);
      escaped = true;
      i++;
      continue;
    }
    const cp = ch.codePointAt(0) as number;
    if (
      (cp >= 0x202a && cp <= 0x202e) ||
      (cp >= 0x2066 && cp <= 0x2069) ||
      cp === 0x2028 ||
      cp === 0x2029 ||
      cp === 0x200e ||
      cp === 0x200f ||
      (cp >= 0x80 && cp < 0xa0)
    ) {
      text += `\\u{${cp.toString(16)}}`;
      escaped = true;
    } else text += ch;
    i += len;
  }
  return { text, escaped };
}
