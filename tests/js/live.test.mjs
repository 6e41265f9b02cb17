// The page's stream: /meta before the socket, its own reconnect ladder, resets on a bad cursor.
import assert from "node:assert/strict";
import test from "node:test";

import { LADDER_MAX_MS, Ladder, LiveStream } from "../../services/board/static/js/live.js";
import { FakeClock, activity, fakeEventSourceClass, fakeFetch, jsonReply, settle } from "./support/fakes.mjs";

function harness(metaFor = () => ({ board_id: "brd_1", revision: 10, floor: 0 })) {
  const clock = new FakeClock();
  const EventSource = fakeEventSourceClass();
  const seeds = [];
  const frames = [];
  const states = [];
  const board = { up: true, meta: metaFor, stream: null };
  const fetch = fakeFetch({
    "/api/v1/meta": () => {
      if (!board.up) throw new TypeError("connection refused");
      return jsonReply(200, board.meta());
    },
    "/api/v1/events": () => {
      if (!board.up) throw new TypeError("connection refused");
      return board.stream || jsonReply(200, {});
    },
  });
  const live = new LiveStream({
    EventSource,
    fetch,
    setTimeout: clock.setTimeout,
    clearTimeout: clock.clearTimeout,
    onSeed: async (meta, reason) => seeds.push([reason, meta.revision]),
    onFrame: (frame) => frames.push(frame),
    onState: (state) => states.push(state),
  });
  const sockets = EventSource.sockets;
  const current = () => sockets[sockets.length - 1];
  const openSockets = () => sockets.filter((socket) => !socket.closed).length;
  return { clock, live, seeds, frames, states, board, fetch, sockets, current, openSockets };
}

test("the ladder doubles from 1 s and holds at 30 s", () => {
  const ladder = new Ladder();
  const delays = Array.from({ length: 8 }, () => ladder.next());
  assert.deepEqual(delays, [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
  ladder.reset();
  assert.equal(ladder.next(), 1000);
  assert.equal(LADDER_MAX_MS, 30000);
});

test("/meta seeds the cursor and the state loads before the one socket opens", async () => {
  const h = harness();
  await h.live.start();
  assert.deepEqual(h.fetch.calls.map((call) => call.url), ["/api/v1/meta"]);
  assert.deepEqual(h.seeds, [["initial", 10]]);
  assert.equal(h.sockets.length, 1);
  assert.equal(h.current().url, "/api/v1/events?after=10");
  assert.deepEqual(h.states, ["connecting"]);
  h.current().open();
  assert.deepEqual(h.states, ["connecting", "live"]);
});

test("frames reach the page and move the cursor the next socket resumes from", async () => {
  const h = harness();
  await h.live.start();
  h.current().open();
  h.current().message(activity("task_moved", { revision: 12 }));
  h.current().message(activity("task_created", { revision: 15 }));
  assert.deepEqual(h.frames.map((frame) => frame.revision), [12, 15]);
  h.board.meta = () => ({ board_id: "brd_1", revision: 20, floor: 0 });
  h.current().fail();
  assert.equal(h.live.state, "reconnecting");
  assert.deepEqual(h.clock.pending(), [1000]);
  await h.clock.advance(1000);
  assert.equal(h.current().url, "/api/v1/events?after=15");
  assert.equal(h.seeds.length, 1, "a plain reconnect does not reload state");
});

test("the socket is closed before a new one opens and the delays climb the ladder", async () => {
  const h = harness();
  await h.live.start();
  h.current().open();
  h.board.up = false;
  h.current().fail();
  const delays = [];
  for (let attempt = 0; attempt < 7; attempt += 1) {
    const [delay] = h.clock.pending();
    delays.push(delay);
    await h.clock.advance(delay);
    assert.ok(h.openSockets() <= 1);
  }
  assert.deepEqual(delays, [1000, 2000, 4000, 8000, 16000, 30000, 30000]);
  assert.equal(h.live.state, "reconnecting");
  h.board.up = true;
  await h.clock.advance(h.clock.pending()[0]);
  assert.equal(h.openSockets(), 1);
  h.current().open();
  assert.equal(h.live.state, "live");
  // `open` reset the ladder: the next failure waits 1 s again.
  h.current().fail();
  assert.deepEqual(h.clock.pending(), [1000]);
  assert.equal(h.openSockets(), 0);
});

test("a shutdown frame resets the ladder and reconnects after 1 s", async () => {
  const h = harness();
  await h.live.start();
  h.current().open();
  h.current().fail();
  await h.clock.advance(1000);
  h.current().fail(); // never opened: probed, then the ladder climbs
  await settle();
  assert.deepEqual(h.clock.pending(), [2000]);
  await h.clock.advance(2000);
  h.current().named("shutdown", { reason: "server_stopping" });
  assert.equal(h.current().closed, true);
  assert.deepEqual(h.clock.pending(), [1000]);
  assert.equal(h.live.state, "reconnecting");
});

test("a late callback of a closed socket changes nothing", async () => {
  const h = harness();
  await h.live.start();
  const old = h.current();
  old.open();
  old.fail();
  await h.clock.advance(1000);
  old.message(activity("task_moved", { revision: 99 }));
  old.open();
  assert.deepEqual(h.frames, []);
  assert.equal(h.live.cursor, 10);
  assert.notEqual(h.live.state, "live");
});

for (const [status, code] of [[400, "CURSOR_AHEAD"], [410, "CURSOR_EXPIRED"]]) {
  test(`a stream refused with ${code} reloads the state and restarts at the head`, async () => {
    const h = harness();
    await h.live.start();
    h.current().open();
    h.current().message(activity("task_moved", { revision: 12 }));
    // /meta looks fine (a race, or a floor /meta does not show): only the stream knows.
    h.board.meta = () => ({ board_id: "brd_1", revision: 40, floor: 0 });
    h.current().fail();
    await h.clock.advance(1000);
    h.board.stream = jsonReply(status, { error: { code } });
    h.current().fail();
    await settle();
    assert.equal(h.fetch.calls.at(-1).url, "/api/v1/events?after=12");
    h.board.stream = null;
    await h.clock.advance(h.clock.pending()[0]);
    assert.deepEqual(h.seeds, [["initial", 10], [code, 40]]);
    assert.equal(h.current().url, "/api/v1/events?after=40");
  });
}

test("a board whose head is behind our cursor is CURSOR_AHEAD without asking the stream", async () => {
  const h = harness();
  await h.live.start();
  h.current().open();
  h.current().message(activity("task_moved", { revision: 30 }));
  h.board.meta = () => ({ board_id: "brd_1", revision: 5, floor: 0 });
  h.current().fail();
  await h.clock.advance(1000);
  assert.deepEqual(h.seeds.at(-1), ["CURSOR_AHEAD", 5]);
  assert.equal(h.current().url, "/api/v1/events?after=5");
});

test("a different board_id reloads everything from the new head", async () => {
  const h = harness();
  await h.live.start();
  h.current().open();
  h.board.meta = () => ({ board_id: "brd_2", revision: 3, floor: 0 });
  h.current().named("shutdown", { reason: "server_stopping" });
  await h.clock.advance(1000);
  assert.deepEqual(h.seeds.at(-1), ["board_changed", 3]);
  assert.equal(h.live.boardId, "brd_2");
  assert.equal(h.current().url, "/api/v1/events?after=3");
});

test("resync reloads the state and replays from the cursor it had", async () => {
  const h = harness();
  await h.live.start();
  h.current().open();
  h.current().message(activity("task_moved", { revision: 14 }));
  h.board.meta = () => ({ board_id: "brd_1", revision: 18, floor: 0 });
  await h.live.resync();
  assert.deepEqual(h.seeds.at(-1), ["resync", 18]);
  assert.equal(h.current().url, "/api/v1/events?after=14");
  assert.equal(h.openSockets(), 1);
});

test("a refused session (401) closes for good", async () => {
  const clock = new FakeClock();
  const states = [];
  const live = new LiveStream({
    EventSource: fakeEventSourceClass(),
    fetch: fakeFetch({ "/api/v1/meta": () => jsonReply(401, { error: { code: "UNAUTHORIZED" } }) }),
    setTimeout: clock.setTimeout,
    clearTimeout: clock.clearTimeout,
    onState: (state) => states.push(state),
  });
  await live.start();
  assert.deepEqual(states, ["connecting", "closed"]);
  assert.deepEqual(clock.pending(), []);
});

test("a failing state reload is retried before any socket opens", async () => {
  const h = harness();
  let fail = true;
  h.live.onSeed = async (meta, reason) => {
    h.seeds.push([reason, meta.revision]);
    if (fail) throw new Error("projects unavailable");
  };
  await h.live.start();
  assert.equal(h.sockets.length, 0);
  fail = false;
  await h.clock.advance(1000);
  assert.deepEqual(h.seeds, [["initial", 10], ["initial", 10]]);
  assert.equal(h.sockets.length, 1);
});
