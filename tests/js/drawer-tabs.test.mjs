// The drawer's tab dispatch: every tab the drawer draws has its own module and loader, each
// loader runs through the map, and a name that is not a tab is refused loudly, touching nothing.
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import test from "node:test";

import { ROOT, settle } from "./support/fakes.mjs";
import { installFakeDocument } from "./support/fake-dom.mjs";

const JS = `${ROOT}services/board/static/js/`;
const document = installFakeDocument();
const { Drawer, TABS, TAB_LOADERS, tabLoader } = await import(`${JS}drawer.js`);

const TASK = {
  id: "t-1", identifier: "DEMO-0001", title: "Write the brief", status: "todo", priority: "medium", kind: "task",
  labels: [], delivery_round: 0, acceptance_mode: "auto", updated_at: "2026-01-01T00:00:00Z", version: 1,
};

const AT = "2026-01-01T00:00:00Z";
/** One row per list the drawer's loaders read, so each tab draws with every helper it imports. */
const ROWS = {
  "/tasks/t-1/acceptance": [{ text: "the brief names its sources" }],
  "/tasks/t-1/comments": [{ id: "c-1", kind: "question", actor_kind: "human", actor_id: "ann", created_at: AT, body: "Which sources?" }],
  "/tasks/t-1/relations": [{ id: "r-1", type: "blocks", direction: "outgoing", other: { identifier: "DEMO-0002", title: "Ship it", status: "todo" } }],
  "/tasks/t-1/reports": [{ round: 1, actor_kind: "claude", actor_id: "agent-7", created_at: AT, body: "Delivered the brief." }],
  "/tasks/t-1/sessions": [{ owner_kind: "claude", owner_id: "agent-7", seg: 2, phase: "work", status: "running", updated_at: AT }],
  "/tasks/t-1/attachments": [{ id: "a-1", filename: "notes.txt", size: 2048, content_type: "text/plain", updated_at: AT }],
  "/tasks/t-1/activities?order=desc": [{ event: "task_created", revision: 3, actor_kind: "human", actor_id: "ann", created_at: AT, changes: { identifier: "DEMO-0001", status: "todo" } }],
};

/** The board's answers to the drawer's reads (the HTTP client's seam); every path asked is kept. */
function fakeApi() {
  const asked = [];
  const rows = (path) => {
    if (!(path in ROWS)) throw new Error(`unexpected read ${path}`);
    return ROWS[path];
  };
  return {
    asked,
    actor: { id: "ann", kind: "human" },
    get: async (path) => (asked.push(`get ${path}`), { items: rows(path) }),
    all: async (path) => (asked.push(`all ${path}`), rows(path)),
  };
}

function drawerWith(api = fakeApi()) {
  const root = document.createElement("aside");
  const state = { tasks: new Map([[TASK.id, TASK]]), nameOf: (id) => id };
  const drawer = new Drawer(root, { api, state, onTask: () => {}, onClose: () => {}, toast: () => {} });
  return { drawer, root, api };
}

test("every tab in the drawer's markup has its own module, whose loader the map names", async () => {
  const { root } = drawerWith();
  const buttons = root.querySelectorAll("button").filter((el) => el.getAttribute("role") === "tab");
  const panels = root.querySelectorAll("section").filter((el) => el.getAttribute("role") === "tabpanel");
  const drawn = buttons.map((button) => button.dataset.tab);
  assert.deepEqual(drawn, TABS);
  assert.deepEqual(panels.map((panel) => panel.dataset.tab), TABS);
  assert.deepEqual(Object.keys(TAB_LOADERS), drawn);
  for (const tab of drawn) {
    const module = await import(`${JS}drawer-${tab}.js`);
    assert.equal(typeof module.load, "function", tab);
    assert.equal(TAB_LOADERS[tab], module.load, `${tab} is dispatched to drawer-${tab}.js`);
    assert.equal(tabLoader(tab), module.load, tab);
  }
  // No tab module the drawer does not use: drawer-parts.js holds what every tab draws with.
  const modules = readdirSync(JS).filter((name) => /^drawer-.+\.js$/.test(name) && name !== "drawer-parts.js");
  assert.deepEqual(modules.sort(), TABS.map((tab) => `drawer-${tab}.js`).sort());
});

test("a name that is not a tab is refused loudly, prototype keys included", () => {
  for (const name of ["nope", "load_details", "constructor", "__proto__", "toString", "hasOwnProperty", "", undefined, null, 3]) {
    assert.throws(() => tabLoader(name), /unknown drawer tab/, String(name));
  }
  assert.ok(Object.isFrozen(TAB_LOADERS), "the map cannot grow at run time");
});

test("loading an unknown tab rejects before it touches a panel or a read", async () => {
  const { drawer, root, api } = drawerWith();
  drawer.open(TASK.id, "details");
  await settle();
  const before = JSON.stringify([...drawer.tabState]);
  const asked = api.asked.length;
  await assert.rejects(drawer.load("constructor"), /unknown drawer tab: "constructor"/);
  await assert.rejects(drawer.load("nope"), /unknown drawer tab: "nope"/);
  assert.equal(JSON.stringify([...drawer.tabState]), before);
  assert.equal(api.asked.length, asked, "no read was made for an unknown tab");
  assert.ok(root.querySelectorAll("section").every((panel) => panel.getAttribute("aria-busy") === null));
});

const EXPECTED = {
  details: { asks: "get /tasks/t-1/acceptance", shows: ["No description.", "the brief names its sources", "medium"], forms: ["move-form", "edit-form"] },
  comments: { asks: "all /tasks/t-1/comments", shows: ["Which sources?", "question"], forms: ["comment-form"] },
  relations: { asks: "get /tasks/t-1/relations", shows: ["This blocks", "DEMO-0002", "Ship it", "Remove"], forms: ["relation-form"] },
  reports: { asks: "all /tasks/t-1/reports", shows: ["Round 1", "Delivered the brief."], forms: [] },
  sessions: { asks: "get /tasks/t-1/sessions", shows: ["work", "running", "Owner"], forms: [] },
  attachments: { asks: "get /tasks/t-1/attachments", shows: ["notes.txt", "2.0 KiB · text/plain"], forms: ["upload-form"] },
  activity: { asks: "all /tasks/t-1/activities?order=desc", shows: ["created DEMO-0001 in todo"], forms: [] },
};

test("opening each tab runs its own module: its read, its content, its form", async () => {
  assert.deepEqual(Object.keys(EXPECTED).sort(), [...TABS].sort());
  for (const tab of TABS) {
    const { drawer, root, api } = drawerWith();
    drawer.open(TASK.id, tab);
    await settle();
    const panel = root.querySelector(`section[id=panel-${tab}]`);
    const body = panel.querySelector(".tab-body").textContent;
    assert.doesNotMatch(body, /Could not load|Loading/, `${tab}: ${body}`);
    for (const text of EXPECTED[tab].shows) assert.ok(body.includes(text), `${tab} shows ${text}: ${body}`);
    assert.ok(api.asked.includes(EXPECTED[tab].asks), `${tab} asked ${api.asked}`);
    const forms = root.querySelectorAll("form").map((form) => form.className.split(" ").find((c) => c.endsWith("-form")));
    assert.deepEqual(forms.sort(), [...EXPECTED[tab].forms].sort(), tab);
  }
});
