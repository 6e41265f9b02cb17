// Caps on what a card and the feed draw of a long text. A card holding 100 KB (emoji included)
// must not stall the page: the card and the feed show the start, the drawer shows all of it.
// No DOM.

/** Characters of an awaiting or blocked reason a card shows. */
export const CARD_TEXT_MAX = 280;
/** Characters of a card's title the board view draws (the drawer's title is whole). */
export const CARD_TITLE_MAX = 200;
/** Characters of one feed entry's detail line. */
export const FEED_TEXT_MAX = 300;
/** Characters of markdown the drawer renders as markdown; beyond that it is shown as plain text. */
export const MARKDOWN_MAX = 100_000;

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
