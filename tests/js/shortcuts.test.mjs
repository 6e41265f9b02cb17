import assert from "node:assert/strict";
import test from "node:test";

import { SHORTCUTS, shortcutAction } from "../../services/board/static/js/shortcuts.js";

const press = (key, extra = {}) => ({ key, shiftKey: false, ctrlKey: false, metaKey: false, altKey: false, ...extra });

test("every key the sheet lists does what it says, and every handled key is listed", () => {
  const handled = new Map([
    ["?", ["page", "help"]], ["/", ["page", "filter"]], ["n", ["page", "create"]], ["a", ["page", "feed"]],
    ["b", ["page", "board"]], ["Escape", ["page", "escape"]], ["c", ["card", "claim"]], ["r", ["card", "release"]],
  ]);
  for (const [key, [scope, action]] of handled) {
    assert.equal(shortcutAction(press(key), scope), action, key);
    assert.ok(SHORTCUTS.some((s) => s.action === action && s.scope === scope), `${action} is on the sheet`);
  }
  assert.equal(shortcutAction(press("ArrowRight", { shiftKey: true }), "card"), "drop-neighbour");
  for (const digit of "12345678") assert.equal(shortcutAction(press(digit), "card"), "drop-column");
  const produced = new Set([...handled.values()].map(([, action]) => action).concat(["drop-neighbour", "drop-column"]));
  // navigate/open are the board view's own (arrows, Enter on the card's button).
  for (const shortcut of SHORTCUTS) assert.ok(produced.has(shortcut.action) || ["navigate", "open"].includes(shortcut.action), shortcut.action);
});

test("chords and unknown keys are left to the browser", () => {
  assert.equal(shortcutAction(press("n", { ctrlKey: true }), "page"), null);
  assert.equal(shortcutAction(press("c", { metaKey: true }), "card"), null);
  assert.equal(shortcutAction(press("9"), "card"), null);
  assert.equal(shortcutAction(press("constructor"), "page"), null);
  assert.equal(shortcutAction(press("ArrowRight"), "card"), null, "plain arrows move the focus");
});

test("no two shortcuts of a scope share a key", () => {
  for (const scope of ["page", "card"]) {
    const keys = SHORTCUTS.filter((s) => s.scope === scope).flatMap((s) => s.keys).filter((k) => k !== "…");
    assert.equal(new Set(keys).size, keys.length, scope);
  }
});
