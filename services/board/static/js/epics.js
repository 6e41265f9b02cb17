// An epic's progress from its children (the `parent` relations it is the source of). No DOM.

/**
 * `{ done, total, canceled }` of an epic's children that the page holds. Canceled children are
 * not counted in `total`: they will never be done, and the board's rollup delivers the epic when
 * every child is terminal, so "3/3 done" is the moment it goes to review.
 */
export function epicProgress(childIds, tasks) {
  let done = 0;
  let total = 0;
  let canceled = 0;
  for (const id of childIds || []) {
    const child = tasks.get(id);
    if (!child) continue;
    if (child.status === "canceled") {
      canceled += 1;
      continue;
    }
    total += 1;
    if (child.status === "done") done += 1;
  }
  return { done, total, canceled };
}

/** "2/5 done" and the bar's fill in percent. */
export function progressLabel({ done, total }) {
  return { text: `${done}/${total} done`, percent: total ? Math.round((done / total) * 100) : 0 };
}

/** The children of `epicId` from its relations list (outgoing `parent` rows). */
export function childrenOf(epicId, relations) {
  return relations.filter((r) => r.type === "parent" && r.source_id === epicId).map((r) => r.target_id);
}
