// The page's HTTP client: same-origin fetch with the session cookie; writes say who is acting.

const ACTOR_KEY = "taskloom:actor";
export const DEFAULT_ACTOR = "me";

export class ApiError extends Error {
  constructor(status, error) {
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || "HTTP_ERROR";
    this.details = error.details || {};
    this.hint = error.hint || null;
  }
}

export function storedActor() {
  try {
    return localStorage.getItem(ACTOR_KEY) || DEFAULT_ACTOR;
  } catch {
    return DEFAULT_ACTOR;
  }
}

export function storeActor(id) {
  try {
    localStorage.setItem(ACTOR_KEY, id);
  } catch {
    /* private mode: the choice lasts this page */
  }
}

export class Api {
  constructor() {
    this.actor = { kind: "human", id: storedActor() };
  }

  setActor(id) {
    this.actor = { kind: "human", id: id || DEFAULT_ACTOR };
    storeActor(this.actor.id);
  }

  async request(method, path, { body, raw, contentType } = {}) {
    const headers = { Accept: "application/json" };
    if (method !== "GET") {
      headers["X-Taskloom-Actor-Kind"] = this.actor.kind;
      headers["X-Taskloom-Actor"] = this.actor.id;
    }
    let payload;
    if (raw !== undefined) {
      payload = raw;
      headers["Content-Type"] = contentType || "application/octet-stream";
    } else if (body !== undefined) {
      payload = JSON.stringify(body);
      headers["Content-Type"] = "application/json";
    }
    const reply = await fetch(`/api/v1${path}`, { method, headers, body: payload, credentials: "same-origin" });
    const text = await reply.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = { error: { code: "HTTP_ERROR", message: text.slice(0, 200) } };
    }
    if (!reply.ok) throw new ApiError(reply.status, (data && data.error) || {});
    return data;
  }

  get(path) {
    return this.request("GET", path);
  }

  post(path, body = {}) {
    return this.request("POST", path, { body });
  }

  patch(path, body) {
    return this.request("PATCH", path, { body });
  }

  delete(path) {
    return this.request("DELETE", path);
  }

  /** Every page of a keyset-paged list. */
  async all(path, { limit = 1000 } = {}) {
    const items = [];
    let cursor = null;
    const join = path.includes("?") ? "&" : "?";
    do {
      const page = await this.get(`${path}${join}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
      items.push(...page.items);
      cursor = page.next_cursor;
    } while (cursor);
    return items;
  }
}

export const q = encodeURIComponent;
