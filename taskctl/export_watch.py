"""``taskctl export watch`` through the hub (SPEC §7.4): the ``watch`` request, the foreground
stream of records, ``--detach``, ``--status`` and ``--stop``."""

from __future__ import annotations

import json as jsonlib
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click

from shared import hub_protocol as hp

from .command import read_text, run_async
from .discovery import Board, current_token
from .errors import TaskctlError, redact

#: Records that end a foreground watch with exit 0.
_CLEAN_END = frozenset({"done", "ttl", "shutdown", "eof"})

Emit = Callable[[dict[str, Any]], None]
T = TypeVar("T")


def ndjson_printer() -> Emit:
    def emit(record: dict[str, Any]) -> None:
        sys.stdout.write(redact(jsonlib.dumps(record, ensure_ascii=False, separators=(",", ":"))) + "\n")
        sys.stdout.flush()

    return emit


def _cards_json(source: str) -> list[dict[str, str]]:
    """``[{ref, out}, …]`` (or ``{"cards": […]}``) from FILE or stdin; relative paths are made absolute."""
    try:
        parsed = jsonlib.loads(read_text(source, "cards file"))
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--cards-json") from None
    if isinstance(parsed, dict) and set(parsed) == {"cards"}:
        parsed = parsed["cards"]
    if not isinstance(parsed, list) or not parsed:
        raise click.BadParameter("expected a non-empty list of {ref, out}", param_hint="--cards-json")
    cards = []
    for index, card in enumerate(parsed):
        if not isinstance(card, dict) or not isinstance(card.get("ref"), str) or not isinstance(card.get("out"), str):
            raise click.BadParameter(f"entry {index} is not {{ref, out}}", param_hint="--cards-json")
        cards.append({**card, "out": os.path.abspath(card["out"])})
    return cards


def watch_message(
    refs: tuple[str, ...], out_file: str | None, out_dir: str | None, cards_json: str | None,
    ttl: float | None, detach: bool,
) -> dict[str, Any]:
    """The hub's ``watch`` request for the command line's spelling (SPEC §7.4)."""
    chosen = [name for name, value in (("--out", out_file), ("--dir", out_dir), ("--cards-json", cards_json)) if value]
    if len(chosen) != 1:
        raise click.UsageError("name where the briefs go: one of --out FILE, --dir DIR or --cards-json FILE")
    ttl_ms = None if ttl is None else round(ttl * 60_000)
    if cards_json:
        if refs:
            raise click.UsageError("--cards-json names the cards itself; give no REF")
        return hp.watch(cards=_cards_json(cards_json), ttl_ms=ttl_ms, detach=detach or None)
    if not refs:
        raise click.UsageError("name at least one card (REF)")
    if out_file:
        if len(refs) != 1:
            raise click.UsageError("--out FILE keeps one card; use --dir DIR for several")
        return hp.watch(ref=refs[0], out=os.path.abspath(out_file), ttl_ms=ttl_ms, detach=detach or None)
    return hp.watch(refs=list(refs), dir=os.path.abspath(out_dir or "."), ttl_ms=ttl_ms, detach=detach or None)


def hub_call(call: Callable[[], Coroutine[Any, Any, T]]) -> T:
    from services.hub import client

    try:
        return run_async(call())
    except (client.HubUnavailable, client.HubError, OSError, TimeoutError) as exc:
        raise TaskctlError("HUB_UNAVAILABLE", f"cannot use the hub: {exc}",
                           hint="see `taskctl events hub`; --standalone works without one") from None


def raise_refusal(answer: dict[str, Any]) -> None:
    if answer.get("type") == "error":
        raise TaskctlError(str(answer.get("code")), str(answer.get("message")), details=answer.get("details") or {})


def print_registered(inv: Any, answer: dict[str, Any]) -> None:
    def human(data: dict[str, Any]) -> None:
        handle = data.get("registration_id")
        if handle:
            inv.out.echo(handle)
        for card in data.get("cards", []):
            inv.out.note(f"{card['identifier']} → {card['path']} ({card['state']}, {card['status']})")
        if not handle:
            inv.out.note(f"no new registration: {data.get('reason')}")

    inv.out.result({key: value for key, value in answer.items() if key != "type"}, human)


async def watch_foreground(inv: Any, board: Board, message: dict[str, Any]) -> int:
    from services.hub import client

    emit = ndjson_printer()
    try:
        async for record in client.watch_stream(board.url, lambda: current_token(board), message):
            emit(record)
            kind = record.get("type")
            if kind == "error":
                inv.out.note(f"error: {record.get('code')}: {record.get('message')}")
                return 1
            if kind in _CLEAN_END:
                return 0
    except (client.HubUnavailable, client.HubError, OSError, TimeoutError) as exc:
        emit({"type": "error", "code": "HUB_LOST", "message": redact(f"{type(exc).__name__}: {exc}")})
        return 1
    return 1


def status_or_stop(inv: Any, stop_id: str | None) -> None:
    from services.hub import client

    board = inv.board()
    if not board.token:
        raise TaskctlError("UNAUTHORIZED", "no board token: the hub needs it", hint="set TASKLOOM_TOKEN or pass --token-file FILE")
    request = hp.watch_stop(stop_id) if stop_id else hp.watch_status()
    answer = hub_call(lambda: client.request_once(board.url, board.token or "", request))
    raise_refusal(answer)
    if stop_id:
        inv.out.result({k: v for k, v in answer.items() if k != "type"},
                       f"stopped {stop_id} ({', '.join(answer.get('refs') or []) or 'no cards'})")
        return
    registrations = answer.get("registrations") or []

    def human(rows: list[dict[str, Any]]) -> None:
        if not rows:
            inv.out.note("no registrations")
            return
        for row in rows:
            mode = "detached" if row["detached"] else f"foreground, {row['viewers']} viewer(s)"
            until = row.get("expires_at") or "the cards are done"
            inv.out.echo(f"{row['registration_id']}  {mode}, until {until}")
            for card in row["cards"]:
                state = card["error"]["code"] if card.get("error") else (card.get("status") or "pending")
                inv.out.echo(f"  {card['identifier']:<12} {state:<12} r{card.get('revision')}  {card['path']}")

    inv.out.result(registrations, human)
