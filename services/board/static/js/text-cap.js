// Caps on what a card and the feed draw of a long text. A card holding 100 KB (emoji included)
// must not stall the page: the card and the feed show the start, the drawer shows all of it.
// No DOM.

/** Characters of an awaiting or blocked reason a card shows. */
export const CARD_TEXT_MAX = 200;
/** Characters of a card's title the board view draws (the drawer's title is whole). */
export const CARD_TITLE_MAX = 200;
/** Characters of one feed entry's detail line. */
export const FEED_TEXT_MAX = 300;
/** Characters of markdown rendered in one go; a longer text is drawn a slice per task. */
export const MARKDOWN_CHUNK = 4000;

const ELLIPSIS = "…";

/**
 * The start of `text` in at most `max` UTF-16 units (plus "…"), cut between graphemes: never
 * inside a surrogate pair, an emoji's ZWJ sequence or a flag. Only the cut's neighbourhood is
 * segmented, so a 100 KB text costs as much as a short one.
 */
export function capText(text, max) {
  const value = String(text ?? "");
  if (value.length <= max) return { text: value, capped: false };
  let cut = max;
  const segmenter = typeof Intl !== "undefined" && Intl.Segmenter ? new Intl.Segmenter(undefined, { granularity: "grapheme" }) : null;
  if (segmenter) {
    // A grapheme is rarely longer than a few dozen units; 64 before the cut is plenty.
    const from = Math.max(0, max - 64);
    cut = from;
    for (const { index, segment } of segmenter.segment(value.slice(from, max + 64))) {
      if (from + index + segment.length > max) break;
      cut = from + index + segment.length;
    }
  } else if (isHighSurrogate(value.charCodeAt(cut - 1))) {
    cut -= 1;
  }
  return { text: value.slice(0, cut).trimEnd() + ELLIPSIS, capped: true };
}

function isHighSurrogate(code) {
  return code >= 0xd800 && code <= 0xdbff;
}

const FENCE = /^ {0,3}(`{3,}|~{3,})/;

/**
 * `text` cut into slices of about `size` characters, each ending at a blank line outside a
 * fenced code block, so each slice is whole markdown blocks and parses alone as it would in the
 * whole. (A list or a reference definition split by a blank line at a cut renders as two.)
 * Joining the slices gives back the text.
 */
export function markdownChunks(text, size = MARKDOWN_CHUNK) {
  const value = String(text ?? "");
  if (value.length <= size) return [value];
  const chunks = [];
  let start = 0;
  let fence = null;
  let at = 0;
  while (at < value.length) {
    const end = value.indexOf("\n", at);
    const lineEnd = end === -1 ? value.length : end + 1;
    const line = value.slice(at, end === -1 ? value.length : end);
    const opened = FENCE.exec(line);
    if (fence === null && opened) fence = opened[1][0];
    else if (fence !== null && opened && opened[1][0] === fence) fence = null;
    else if (fence === null && line.trim() === "" && lineEnd - start >= size) {
      chunks.push(value.slice(start, lineEnd));
      start = lineEnd;
    }
    at = lineEnd;
  }
  if (start < value.length) chunks.push(value.slice(start));
  return chunks;
}
