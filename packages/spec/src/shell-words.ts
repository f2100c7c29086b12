/**
 * Splits a command string into words the way Compose does for `command: ...` and
 * `entrypoint: ...` given as strings (POSIX shell quoting, no expansion): quotes group, backslash
 * escapes outside single quotes. Returns undefined on an unterminated quote.
 */
export function splitShellWords(input: string): string[] | undefined {
  const words: string[] = [];
  let word = "";
  let inWord = false;
  let quote: "'" | '"' | null = null;
  for (let i = 0; i < input.length; i++) {
    const ch = input[i] as string;
    if (quote === "'") {
      if (ch === "'") quote = null;
      else word += ch;
    } else if (quote === '"') {
      if (ch === '"') quote = null;
      else if (ch === "\\" && i + 1 < input.length && '"\\$`\n'.includes(input[i + 1] as string))
        word += input[++i];
      else word += ch;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
      inWord = true;
    } else if (ch === "\\") {
      if (i + 1 < input.length) word += input[++i];
      inWord = true;
    } else if (/\s/.test(ch)) {
      if (inWord) words.push(word);
      word = "";
      inWord = false;
    } else {
      word += ch;
      inWord = true;
    }
  }
  if (quote) return undefined;
  if (inWord) words.push(word);
  return words;
}
