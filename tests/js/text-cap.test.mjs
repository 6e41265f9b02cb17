import assert from "node:assert/strict";
import test from "node:test";

import { CARD_TEXT_MAX, capText } from "../../services/board/static/js/text-cap.js";

test("short text is left whole", () => {
  assert.deepEqual(capText("hello", 10), { text: "hello", capped: false });
  assert.deepEqual(capText(null, 10), { text: "", capped: false });
});

test("long text is cut at the cap with an ellipsis", () => {
  const { text, capped } = capText("a".repeat(1000), CARD_TEXT_MAX);
  assert.equal(capped, true);
  assert.equal(text, "a".repeat(CARD_TEXT_MAX) + "…");
});

test("the cut never splits an emoji, a ZWJ family or a flag", () => {
  for (const emoji of ["🚀", "👩‍👩‍👧‍👦", "🇫🇷", "é"]) {
    const long = emoji.repeat(50_000); // 100 KB and more
    for (const max of [1, 7, 99, 280]) {
      const { text, capped } = capText(long, max);
      assert.equal(capped, true);
      const body = text.slice(0, -1);
      assert.ok(body.length <= max, `${emoji} at ${max}: ${body.length} units`);
      assert.equal(body.replaceAll(emoji, ""), "", `${emoji} at ${max}: a broken grapheme`);
    }
  }
});

test("a 100 KB text is capped in well under a millisecond per call", () => {
  const long = "🚀 lift-off ".repeat(10_000);
  const started = performance.now();
  for (let i = 0; i < 100; i += 1) capText(long, CARD_TEXT_MAX);
  // Generous: the point is that the cost does not grow with the text (segmenting it all takes ~50 ms).
  assert.ok(performance.now() - started < 500);
});

test("markdown slices end at blank lines outside code fences and join back to the text", async () => {
  const { markdownChunks } = await import("../../services/board/static/js/text-cap.js");
  const fenced = "```\n" + "code line\n\n".repeat(50) + "```\n";
  const text = ["# Title", "para ".repeat(30), fenced, "- item\n- item", "tail ".repeat(40)].join("\n\n");
  const chunks = markdownChunks(text, 100);
  assert.ok(chunks.length > 2);
  assert.equal(chunks.join(""), text);
  for (const chunk of chunks) {
    const fences = chunk.split("\n").filter((line) => line.startsWith("```")).length;
    assert.equal(fences % 2, 0, `a slice splits a code fence: ${JSON.stringify(chunk.slice(0, 40))}`);
  }
  assert.deepEqual(markdownChunks("short", 100), ["short"]);
  assert.deepEqual(markdownChunks("", 100), [""]);
});
