// Test doubles for the page's injected seams: timers, fetch, EventSource. Not our components:
// these stand in for the browser.

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

/** The declared vocabulary, read from shared/events.py (the single source). */
export function declaredEvents() {
  const source = readFileSync(`${ROOT}shared/events.py`, "utf8");
  const names = new Map();
  for (const match of source.matchAll(/^([A-Z_]+): Final = "([a-z_]+)"$/gm)) names.set(match[1], match[2]);
  const tuple = source.match(/^EVENTS: Final\[tuple\[str, \.\.\.\]\] = \(([\s\S]*?)\n\)/m);
  if (!tuple) throw new Error("EVENTS tuple not found in shared/events.py");
  const events = tuple[1].split(",").map((part) => part.trim()).filter(Boolean).map((constant) => names.get(constant));
  if (events.some((name) => !name)) throw new Error("EVENTS names an undeclared constant");
  const set = (label) => {
    const found = source.match(new RegExp(`^${label}: Final\\[frozenset\\[str\\]\\] = frozenset\\(\\{([^}]*)\\}\\)`, "m"));
    return new Set(found[1].split(",").map((part) => names.get(part.trim())).filter(Boolean));
  };
  return { events, taskless: set("TASKLESS"), noise: set("WIRE_NOISE"), historical: set("HISTORICAL") };
}

/** A manual clock: setTimeout queues, advance(ms) fires what is due, in order. */
export class FakeClock {
  constructor() {
    this.now = 0;
    this.queue = [];
    this.seq = 0;
    this.setTimeout = (fn, ms) => {
      const id = ++this.seq;
      this.queue.push({ id, at: this.now + ms, fn });
      return id;
    };
    this.clearTimeout = (id) => {
      this.queue = this.queue.filter((item) => item.id !== id);
    };
  }

  pending() {
    return this.queue.map((item) => item.at - this.now).sort((a, b) => a - b);
  }

  async advance(ms) {
    const until = this.now + ms;
    for (;;) {
      this.queue.sort((a, b) => a.at - b.at || a.id - b.id);
      const next = this.queue[0];
      if (!next || next.at > until) break;
      this.queue.shift();
      this.now = next.at;
      next.fn();
      await settle();
    }
    this.now = until;
    await settle();
  }
}

/** Let every already-resolved promise chain run. */
export async function settle() {
  for (let i = 0; i < 20; i += 1) await new Promise((resolve) => setImmediate(resolve));
}

export function jsonReply(status, body) {
  return { status, ok: status >= 200 && status < 300, json: async () => body };
}

/** fetch answering from a table of url-prefix -> handler(url) returning a reply or throwing. */
export function fakeFetch(routes) {
  const calls = [];
  const fetch = async (url, init = {}) => {
    calls.push({ url, init });
    for (const [prefix, handler] of Object.entries(routes)) {
      if (url.startsWith(prefix)) return handler(url, init);
    }
    throw new TypeError(`fetch failed: ${url}`);
  };
  fetch.calls = calls;
  return fetch;
}

/** A browser EventSource stand-in; the test drives it with open()/message()/fail()/named(). */
export function fakeEventSourceClass() {
  const sockets = [];
  class FakeEventSource {
    constructor(url, init) {
      this.url = url;
      this.init = init;
      this.closed = false;
      this.listeners = new Map();
      this.onopen = null;
      this.onmessage = null;
      this.onerror = null;
      sockets.push(this);
    }
    addEventListener(name, fn) {
      this.listeners.set(name, fn);
    }
    close() {
      this.closed = true;
    }
    open() {
      this.onopen && this.onopen({});
    }
    message(activity, id = activity.revision) {
      this.onmessage && this.onmessage({ data: JSON.stringify(activity), lastEventId: String(id) });
    }
    named(name, data) {
      const fn = this.listeners.get(name);
      fn && fn({ data: JSON.stringify(data) });
    }
    fail() {
      this.onerror && this.onerror({});
    }
  }
  FakeEventSource.sockets = sockets;
  return FakeEventSource;
}

let nextId = 1;
export function activity(event, fields = {}) {
  const id = fields.id ?? nextId++;
  return {
    id,
    revision: fields.revision ?? id,
    task_id: "t1",
    project_id: "demo",
    actor_kind: "human",
    actor_id: "ann",
    event,
    changes: {},
    created_at: "2024-05-01T10:00:00.000Z",
    ...fields,
  };
}
