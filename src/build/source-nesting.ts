/**
 * How deeply a kernel source nests its brackets, checked before the compiler sees it. The
 * compiler's parser, its tree walks and the structured clone of its answer all recurse once per
 * level: 1,000 nested `if` blocks overflowed the clone's stack and 3,000 ran for minutes. A kernel
 * nests a few levels; MAX_SOURCE_NESTING leaves room for generated code and refuses the rest at
 * once, naming the file and line.
 */
import { errors } from '../errors.js';

/** The deepest nesting of `{`, `(` and `[` a kernel source may have. */
export const MAX_SOURCE_NESTING = 128;

/**
 * Throws INVALID_ARGUMENT naming `shown` and the line where `text` first nests deeper than
 * MAX_SOURCE_NESTING. Brackets in comments, strings and template text do not count; a template's
 * `${...}` does.
 */
export function checkSourceNesting(text: string, shown: string): void {
  let depth = 0;
  let line = 1;
  /** For each open bracket: whether it is a template's `${` (its `}` goes back into the template's text). */
  const opened: boolean[] = [];
  let i = 0;
  const skipString = (quote: string) => {
    for (i++; i < text.length && text[i] !== quote && text[i] !== '\n'; i++) if (text[i] === '\\') i++;
  };
  /** Skips template text from i (just after '`' or a `${...}`'s '}'); stops at the closing '`' or at a '${'. */
  const skipTemplate = (): boolean => {
    for (; i < text.length; i++) {
      const c = text[i];
      if (c === '\n') line++;
      else if (c === '\\') i++;
      else if (c === '`') return false;
      else if (c === '$' && text[i + 1] === '{') {
        i++;
        return true;
      }
    }
    return false;
  };
  const open = (template: boolean) => {
    opened.push(template);
    if (++depth > MAX_SOURCE_NESTING) {
      throw errors.invalidArgument(
        `${shown}:${line}: the source nests deeper than ${MAX_SOURCE_NESTING} levels of brackets (MAX_SOURCE_NESTING); flatten its nested blocks or split it into functions`,
      );
    }
  };
  for (; i < text.length; i++) {
    const c = text[i];
    if (c === '\n') line++;
    else if (c === '/' && text[i + 1] === '/') {
      while (i < text.length && text[i] !== '\n') i++;
      line++;
    } else if (c === '/' && text[i + 1] === '*') {
      const end = text.indexOf('*/', i + 2);
      const stop = end < 0 ? text.length : end + 1;
      for (; i < stop; i++) if (text[i] === '\n') line++;
    } else if (c === '"' || c === "'") skipString(c);
    else if (c === '`') {
      i++;
      if (skipTemplate()) open(true);
    } else if (c === '{' || c === '(' || c === '[') open(false);
    else if (c === '}' || c === ')' || c === ']') {
      if (depth === 0) continue; // unbalanced: the compiler says where
      depth--;
      if (opened.pop() === true) {
        i++;
        if (skipTemplate()) open(true);
      }
    }
  }
}
