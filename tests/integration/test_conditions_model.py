"""``/breaches`` equals what the signals said, and both equal a model of the rules, after random
sequences of moves and relation changes (hypothesis drives a real board on loopback).

The model is the rule written out plainly: a card is blocked while it is live and a ``blocks``
source of it is not terminal; the WIP limit is exceeded while a column holds more than it; a
monitored lane is drained while it is empty. It predicts every ``DEPENDENCY_OPEN`` refusal, and
after each sequence the ready queue, ``blocked_by`` on every card, the folded signal stream and
``/breaches`` (a blocked card's blockers included) must all agree with it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared import domain
from shared.conditions import CLEARED_BY
from tests.support.board import API, REPORT, BoardClient, start_board
from tests.support.signals import RawStream

CARDS = 5
WIP = 1
LANE = "todo"

operations = st.lists(
    st.one_of(
        st.tuples(st.just("claim"), st.integers(0, CARDS - 1)),
        st.tuples(st.just("deliver"), st.integers(0, CARDS - 1)),
        st.tuples(st.just("move"), st.integers(0, CARDS - 1), st.sampled_from(domain.STATUSES)),
        st.tuples(st.just("reopen"), st.integers(0, CARDS - 1)),
        st.tuples(st.just("block"), st.integers(0, CARDS - 1), st.integers(0, CARDS - 1)),
        st.tuples(st.just("unblock"), st.integers(0, CARDS - 1), st.integers(0, CARDS - 1)),
    ),
    max_size=18,
)


@dataclass
class Model:
    status: dict[str, str]
    ident: dict[str, str]
    blocks: dict[tuple[str, str], str] = field(default_factory=dict)  # (source, target) → relation id

    def blockers(self, card: str) -> list[str]:
        if self.status[card] in domain.TERMINAL:
            return []
        return sorted(self.ident[s] for (s, t) in self.blocks if t == card and self.status[s] not in domain.TERMINAL)

    def open_blockers(self, card: str) -> list[str]:
        """The gate's view: open blockers whatever the card's own status."""
        return sorted(self.ident[s] for (s, t) in self.blocks if t == card and self.status[s] not in domain.TERMINAL)

    def holding(self) -> dict[tuple[str, str], Any]:
        """Every condition that holds, with a blocked card's open blockers."""
        found: dict[tuple[str, str], Any] = {
            ("card_blocked", card): self.blockers(card) for card in self.status if self.blockers(card)
        }
        counts = {status: sum(1 for s in self.status.values() if s == status) for status in domain.STATUSES}
        if counts["in_progress"] > WIP:
            found[("wip_exceeded", "in_progress")] = None
        if counts[LANE] == 0:
            found[("lane_drained", LANE)] = None
        return found

    def ready(self) -> set[str]:
        return {card for card, status in self.status.items() if status == "todo" and not self.open_blockers(card)}


def subject(item: dict[str, Any]) -> str:
    return item["task_id"] or item["changes"]["status"]


def fold(signals: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
    """What holds after the signals, in order: a crossing adds, its clearing removes. A card's
    blockers ride along: ``card_blocked`` is sent again, with the new list, when the open blockers
    change while the card stays blocked, and only then."""
    clears = {clear: cross for cross, clear in CLEARED_BY.items()}
    held: dict[tuple[str, str], Any] = {}
    for signal in signals:
        if signal["project_id"] != "demo":
            continue
        key = (signal["type"], subject(signal))
        if signal["type"] in CLEARED_BY:
            if key in held:
                assert signal["type"] == "card_blocked", f"crossed twice: {signal}"
                assert held[key] != signal["changes"]["blockers"], f"sent again with nothing changed: {signal}"
            held[key] = signal["changes"].get("blockers")
        elif signal["type"] in clears:
            key = (clears[signal["type"]], subject(signal))
            assert key in held, f"cleared what did not hold: {signal}"
            del held[key]
    return held


async def apply(client: BoardClient, model: Model, cards: list[str], op: tuple[Any, ...]) -> None:
    kind, index = op[0], op[1]
    card = cards[index]
    gated = False
    if kind == "claim":
        reply = await client.post(f"{API}/tasks/{card}/claim", {})
        gated, to = True, "in_progress"
    elif kind == "deliver":
        reply = await client.post(f"{API}/tasks/{card}/deliver", {"body": REPORT})
        gated, to = True, "in_review"
    elif kind == "move":
        to = op[2]
        reply = await client.post(f"{API}/tasks/{card}/move", {"to": to})
        gated = to in ("in_review", "done") and model.status[card] != to
    elif kind == "reopen":
        reply = await client.post(f"{API}/tasks/{card}/reopen", {"reason": "needs another pass"})
        to = "todo"
    elif kind == "block":
        target = cards[op[2]]
        reply = await client.post(f"{API}/tasks/{card}/relations", {"type": "blocks", "target": target})
        if reply.status == 201:
            model.blocks[(card, target)] = reply.body["id"]
        return
    else:
        target = cards[op[2]]
        relation = model.blocks.get((card, target))
        if relation is None:
            return
        reply = await client.request("DELETE", f"{API}/tasks/{card}/relations/{relation}")
        assert reply.status == 200, reply.body
        del model.blocks[(card, target)]
        return
    if reply.error == "DEPENDENCY_OPEN":
        assert gated and model.open_blockers(card), (op, reply.body)
        assert reply.body["error"]["details"]["blockers"] == model.open_blockers(card)
        return
    if reply.status == 200:
        assert not (gated and model.open_blockers(card) and model.status[card] != to), (op, "the gate let it through")
        model.status[card] = reply.body["status"]


async def scenario(data_dir: Path, ops: list[tuple[Any, ...]]) -> None:
    board = await start_board(data_dir)
    try:
        async with aiohttp.ClientSession() as session:
            client = BoardClient(board.url, board.token, session)
            stream = await RawStream.open(session, board.url, board.token)
            demo = {"wip_limits": {"in_progress": WIP}, "monitors": {"lanes": [LANE]}}
            assert (await client.post(f"{API}/projects", {"id": "demo", "settings": demo})).status == 201
            assert (await client.post(f"{API}/projects", {"id": "probe"})).status == 201
            created = [
                (await client.post(f"{API}/tasks", {"project": "demo", "title": f"card {n}", "acceptance_mode": "none"})).body
                for n in range(CARDS)
            ]
            cards = [task["id"] for task in created]
            model = Model({c: "todo" for c in cards}, {t["id"]: t["identifier"] for t in created})
            for op in ops:
                await apply(client, model, cards, op)
            probe = (await client.post(f"{API}/tasks", {"project": "probe", "title": "probe"})).body
            await stream.wait_for(lambda f: f.data is not None and not f.is_signal and f.data.get("task_id") == probe["id"])
            breaches = (await client.get(f"{API}/breaches?project=demo")).body["items"]
            from_breaches = {(item["type"], subject(item)): item["changes"].get("blockers") for item in breaches}
            assert fold(stream.signals()) == from_breaches == model.holding()
            ready = {t["id"] for t in (await client.get(f"{API}/tasks?ready=true&project=demo")).body["items"]}
            assert ready == model.ready()
            listed = (await client.get(f"{API}/tasks?project=demo")).body["items"]
            assert {t["id"]: t["blocked_by"] for t in listed} == {c: model.open_blockers(c) for c in cards}
            not_blocked = {t["id"] for t in (await client.get(f"{API}/tasks?project=demo&blocked=false")).body["items"]}
            assert not_blocked == {c for c in cards if not model.open_blockers(c)}
            stream.close()
    finally:
        await board.runner.cleanup()


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_breaches_equal_the_signals_and_the_model(tmp_path_factory: Any, ops: list[tuple[Any, ...]]) -> None:
    asyncio.run(scenario(tmp_path_factory.mktemp("board") / "data", ops))
