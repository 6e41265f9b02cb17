import assert from "node:assert/strict";
import test from "node:test";

import { EMPTY_FILTER, filterSearch, isActive, matches, parseFilter, summary, textQuery } from "../../services/board/static/js/filter.js";

const card = (fields = {}) => ({ id: "t1", labels: ["docs"], assignee_id: "ann", kind: "bug", priority: "high", ...fields });

test("the URL round-trips the filter and the project", () => {
  const filter = { q: "login page", label: "docs", assignee: "ann", kind: "bug", priority: "high" };
  const search = filterSearch(filter, "demo");
  assert.equal(search, "?project=demo&q=login+page&label=docs&assignee=ann&kind=bug&priority=high");
  assert.deepEqual(parseFilter(search), { filter, project: "demo" });
});

test("parameters the filter does not own are kept; empty fields leave the URL", () => {
  assert.equal(filterSearch({ ...EMPTY_FILTER, q: "x" }, null, "?debug=1&q=old&kind=bug"), "?debug=1&q=x");
  assert.equal(filterSearch(EMPTY_FILTER, null, ""), "");
});

test("an unusable value in a shared link is dropped, not trusted", () => {
  const { filter, project } = parseFilter("?kind=constructor&priority=__proto__&q=" + "y".repeat(500) + "&label=Docs");
  assert.equal(filter.kind, "");
  assert.equal(filter.priority, "");
  assert.equal(filter.q.length, 200, "capped at the board's SEARCH_MAX_CHARS");
  assert.equal(filter.label, "docs", "labels are stored lower-case");
  assert.equal(project, null);
  assert.deepEqual(parseFilter("").filter, EMPTY_FILTER);
});

test("every field narrows; text uses the board's answer once it is there", () => {
  assert.equal(isActive(EMPTY_FILTER), false);
  assert.equal(matches(card(), EMPTY_FILTER, null), true);
  assert.equal(matches(card(), { ...EMPTY_FILTER, label: "ops" }, null), false);
  assert.equal(matches(card(), { ...EMPTY_FILTER, assignee: "bob" }, null), false);
  assert.equal(matches(card(), { ...EMPTY_FILTER, kind: "task" }, null), false);
  assert.equal(matches(card(), { ...EMPTY_FILTER, priority: "low" }, null), false);
  const text = { ...EMPTY_FILTER, q: "login" };
  assert.equal(isActive(text), true);
  assert.equal(matches(card(), text, null), true, "no answer yet: nothing flickers away");
  assert.equal(matches(card(), text, new Set(["t1"])), true);
  assert.equal(matches(card(), text, new Set()), false);
});

test("the text goes to the board as q=, escaped, or not at all", () => {
  assert.equal(textQuery("demo", { ...EMPTY_FILTER, q: " a&b " }), "/tasks?project=demo&q=a%26b&archived=true");
  assert.equal(textQuery("demo", EMPTY_FILTER), null);
  assert.equal(textQuery(null, { ...EMPTY_FILTER, q: "x" }), null);
  assert.equal(summary(1, 1), "1 of 1 card");
  assert.equal(summary(2, 9), "2 of 9 cards");
});
