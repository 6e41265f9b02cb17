// The page's one connection to GET /api/v1/events (SPEC §6, §11). No DOM: the EventSource
// constructor, fetch and timers are passed in, so node --test drives it with fakes.
//
// The page owns its reconnect instead of the browser's fixed-interval retry: 1 s doubling to
// 30 s, the socket closed before a new one opens, the ladder reset on `open` and on the
// server's `shutdown` frame. /meta is read before every (re)connect: it seeds the cursor the
// first time, and afterwards tells a restarted board from a different board (board_id) and a
// cursor the board cannot honour (ahead of the head, or under the retention floor).

export const LADDER_START_MS = 1000;
export const LADDER_MAX_MS = 30000;

// Error codes of the stream that mean "your cursor is useless here": start over from the head.
export const RESET_CODES = new Set(["CURSOR_AHEAD", "CURSOR_EXPIRED"]);

export class Ladder {
  constructor(start = LADDER_START_MS, max = LADDER_MAX_MS) {
    this.start = start;
    this.max = max;
    this.current = start;
  }

  /** The delay to wait now; the one after it doubles, held at the maximum. */
  next() {
    const delay = this.current;
    this.current = Math.min(this.current * 2, this.max);
    return delay;
  }

  reset() {
    this.current = this.start;
  }
}

// The cursor rides in the query. A native reconnect would resend this URL with a newer
// Last-Event-ID; the board resumes from the later of the two (SPEC §6.2), so even then nothing
// replays. The page closes its socket on error and reopens it on its own cursor anyway.
export function streamUrl(base, cursor) {
  return `${base}/api/v1/events?after=${encodeURIComponent(String(cursor))}`;
}

/**
 * States: "connecting" (first attempt), "live" (socket open), "reconnecting" (waiting on the
 * ladder or re-opening), "closed" (stopped on purpose, or the board refused us: 401).
 *
 * Callbacks: onSeed(meta, reason) is awaited before a socket opens whenever the page must
 * (re)load its state ("initial", "board_changed", "CURSOR_AHEAD", "CURSOR_EXPIRED", "resync");
 * onFrame(activity) gets each activity frame in revision order; onState(state, detail).
 * onSignal(data) gets each `event: signal` frame (a condition, docs/conditions.md): it has no id,
 * so it never moves the cursor and is never replayed; onOpen() runs each time a socket opens, the
 * place to read GET /breaches instead of trusting signals missed while away.
 */
export class LiveStream {
  constructor({
    EventSource,
    fetch,
    setTimeout,
    clearTimeout,
    base = "",
    onSeed = async () => {},
    onFrame = () => {},
    onState = () => {},
    onSignal = () => {},
    onOpen = () => {},
    log = () => {},
  }) {
    this.EventSource = EventSource;
    this.fetch = fetch;
    this.setTimeout = setTimeout;
    this.clearTimeout = clearTimeout;
    this.base = base;
    this.onSeed = onSeed;
    this.onFrame = onFrame;
    this.onState = onState;
    this.onSignal = onSignal;
    this.onOpen = onOpen;
    this.log = log;
    this.ladder = new Ladder();
    this.state = "idle";
    this.boardId = null;
    this.cursor = null;
    this.socket = null;
    this.timer = null;
    this.pendingReset = null; // a reason to reseed on the next connect
    this.generation = 0; // bumps on every close so late callbacks of an old socket are ignored
  }

  start() {
    this.setState("connecting");
    return this.connect();
  }

  /** Reload state and reconnect from the current cursor: missed frames replay, no page reload. */
  resync() {
    this.halt();
    this.ladder.reset();
    this.pendingReset = this.pendingReset || "resync";
    this.setState("reconnecting");
    return this.connect();
  }

  close() {
    this.halt();
    this.setState("closed");
  }

  setState(state, detail = {}) {
    if (this.state === state && !detail.reason) return;
    this.state = state;
    this.onState(state, detail);
  }

  /** Close the socket and forget the waiting retry; nothing of the old attempt may act later. */
  halt() {
    this.generation += 1;
    if (this.timer !== null) {
      this.clearTimeout(this.timer);
      this.timer = null;
    }
    if (this.socket !== null) {
      this.socket.close();
      this.socket = null;
    }
  }

  retryLater() {
    this.halt();
    if (this.state !== "connecting") this.setState("reconnecting");
    const delay = this.ladder.next();
    const generation = this.generation;
    this.timer = this.setTimeout(() => {
      this.timer = null;
      if (generation === this.generation) this.connect();
    }, delay);
    return delay;
  }

  async connect() {
    const generation = ++this.generation;
    let meta;
    try {
      const reply = await this.fetch(`${this.base}/api/v1/meta`, { credentials: "same-origin" });
      if (reply.status === 401) return this.refused(generation);
      if (!reply.ok) throw new Error(`meta answered ${reply.status}`);
      meta = await reply.json();
    } catch (error) {
      if (generation !== this.generation) return;
      this.log("meta unreachable", String(error));
      this.retryLater();
      return;
    }
    if (generation !== this.generation) return;

    let reason = this.pendingReset;
    if (this.boardId === null) reason = "initial";
    else if (meta.board_id !== this.boardId) reason = "board_changed";
    else if (this.cursor > meta.revision) reason = "CURSOR_AHEAD";
    else if (this.cursor < (meta.floor || 0)) reason = "CURSOR_EXPIRED";
    if (reason) {
      this.boardId = meta.board_id;
      // A resync keeps its cursor (missed rows replay); every other reason starts at the head.
      if (reason !== "resync" || this.cursor === null) this.cursor = meta.revision;
      this.pendingReset = null;
      try {
        await this.onSeed(meta, reason);
      } catch (error) {
        if (generation !== this.generation) return;
        this.log("state reload failed", String(error));
        this.pendingReset = reason;
        this.retryLater();
        return;
      }
      if (generation !== this.generation) return;
    }
    this.open();
  }

  open() {
    this.halt();
    const generation = this.generation;
    const url = streamUrl(this.base, this.cursor);
    const socket = new this.EventSource(url, { withCredentials: true });
    this.socket = socket;
    let opened = false;
    socket.onopen = () => {
      if (generation !== this.generation) return;
      opened = true;
      this.ladder.reset();
      this.setState("live");
      this.onOpen();
    };
    socket.onmessage = (message) => {
      if (generation !== this.generation) return;
      this.receive(message);
    };
    socket.addEventListener("signal", (message) => {
      if (generation !== this.generation) return;
      let data;
      try {
        data = JSON.parse(message.data);
      } catch {
        this.log("unreadable signal", message.data);
        return;
      }
      this.onSignal(data);
    });
    socket.addEventListener("shutdown", () => {
      if (generation !== this.generation) return;
      // The server ended the stream on purpose (stopping, lifetime): come back promptly.
      this.ladder.reset();
      this.retryLater();
    });
    socket.onerror = () => {
      if (generation !== this.generation) return;
      this.halt();
      if (opened) {
        this.retryLater();
      } else {
        // EventSource hides the status of a refused stream; ask again with fetch to learn why.
        this.probe(url, this.generation);
      }
    };
  }

  receive(message) {
    let activity;
    try {
      activity = JSON.parse(message.data);
    } catch {
      this.log("unreadable frame", message.data);
      return;
    }
    const revision = Number(message.lastEventId || activity.revision);
    if (Number.isFinite(revision) && revision > this.cursor) this.cursor = revision;
    this.onFrame(activity);
  }

  async probe(url, generation) {
    this.setState(this.state === "connecting" ? "connecting" : "reconnecting");
    const abort = typeof AbortController === "function" ? new AbortController() : null;
    let code = null;
    let status = 0;
    try {
      const reply = await this.fetch(url, { credentials: "same-origin", signal: abort && abort.signal });
      status = reply.status;
      if (reply.ok) {
        abort && abort.abort(); // the stream would have worked: a transient failure
      } else {
        const body = await reply.json().catch(() => null);
        code = body && body.error ? body.error.code : null;
      }
    } catch (error) {
      this.log("stream probe failed", String(error));
    }
    if (generation !== this.generation) return;
    if (status === 401) return this.refused(generation);
    if (RESET_CODES.has(code)) {
      this.pendingReset = code;
      this.ladder.reset();
    }
    this.retryLater();
  }

  refused(generation) {
    if (generation !== this.generation) return;
    this.halt();
    this.setState("closed", { reason: "unauthorized" });
  }
}
