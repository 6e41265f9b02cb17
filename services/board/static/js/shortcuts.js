// The page's keyboard shortcuts: one table, read by the key handler and by the `?` sheet, so the
// sheet cannot list a key that does nothing or miss one that does. No DOM.

/**
 * `scope` "page": anywhere but a text field or a dialog; "card": while a card has the focus.
 * `action` names the handler; `keys` is what the sheet shows.
 */
export const SHORTCUTS = Object.freeze([
  { scope: "page", keys: ["?"], action: "help", text: "Show or hide these shortcuts" },
  { scope: "page", keys: ["/"], action: "filter", text: "Focus the filter" },
  { scope: "page", keys: ["n"], action: "create", text: "New task" },
  { scope: "page", keys: ["a"], action: "feed", text: "Open or close the activity feed" },
  { scope: "page", keys: ["b"], action: "board", text: "Go to the first card" },
  { scope: "page", keys: ["Esc"], action: "escape", text: "Close the sheet, the dialog or the card" },
  { scope: "card", keys: ["↑", "↓", "←", "→"], action: "navigate", text: "Move between cards" },
  { scope: "card", keys: ["Enter"], action: "open", text: "Open the card" },
  { scope: "card", keys: ["c"], action: "claim", text: "Claim the card as you" },
  { scope: "card", keys: ["r"], action: "release", text: "Release your card (back to To do)" },
  { scope: "card", keys: ["Shift+←", "Shift+→"], action: "drop-neighbour", text: "Move the card to the previous or next column" },
  { scope: "card", keys: ["1", "…", "8"], action: "drop-column", text: "Move the card to column 1–8, as a drop would" },
]);

const PAGE_KEYS = { "?": "help", "/": "filter", n: "create", a: "feed", b: "board", Escape: "escape" };
const CARD_KEYS = { c: "claim", r: "release" };

/** The action a key press asks for in `scope`, or null. Modifier chords are left to the browser. */
export function shortcutAction(event, scope) {
  if (event.ctrlKey || event.metaKey || event.altKey) return null;
  if (scope === "card") {
    if (event.shiftKey && (event.key === "ArrowLeft" || event.key === "ArrowRight")) return "drop-neighbour";
    if (/^[1-8]$/.test(event.key)) return "drop-column";
    if (Object.hasOwn(CARD_KEYS, event.key)) return CARD_KEYS[event.key];
    return null;
  }
  return Object.hasOwn(PAGE_KEYS, event.key) ? PAGE_KEYS[event.key] : null;
}
