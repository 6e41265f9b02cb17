"""Knobs that were reachable only from Python are now options and variables of ``taskd serve``:
the default actor and the claim windows, checked on a real ``taskd`` started with them in its
environment; and the table machinery itself (defaults shown, values parsed as the CLI does)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import click
import pytest

from services.board.settings import SERVE_KNOBS, ActorParam, BoardSettings
from services.board.store import Actor
from services.hub.settings import CADENCE_KNOBS
from shared import knobs
from shared.knobs import Knob
from tests.support.board import API, BoardClient, TaskdProcess, make_task
from tests.support.waiting import wait_until


@pytest.mark.parametrize(("text", "actor"), [
    ("ann", Actor("human", "ann")),
    ("claude:worker-1", Actor("claude", "worker-1")),
    (" codex : w2 ", Actor("codex", "w2")),
])
def test_a_default_actor_is_id_or_kind_colon_id(text: str, actor: Actor) -> None:
    assert ActorParam().convert(text, None, None) == actor


@pytest.mark.parametrize(("text", "says"), [
    ("", "name the actor"),
    ("claude:", "name the actor"),
    ("agent:w1", "is a role"),
    ("taskd:w1", "is a role"),
    ("system:board", "the board's own actor"),
    ("x" * 500, "at most"),
])
def test_a_bad_default_actor_is_refused_at_start(text: str, says: str) -> None:
    with pytest.raises(click.BadParameter, match=says):
        ActorParam().convert(text, None, None)
    command = click.Command("serve", params=[click.Option(["--default-actor"], type=ActorParam())])
    with pytest.raises(click.BadParameter, match=says):
        command.make_context("serve", ["--default-actor", text])


def test_a_knob_reads_its_variable_as_the_command_line_does() -> None:
    (debounce, *_) = CADENCE_KNOBS
    assert debounce.parse("0.05") == 0.05
    with pytest.raises(click.BadParameter):
        debounce.parse("-1")
    with pytest.raises(click.BadParameter):
        debounce.parse("soon")


def test_defaults_are_shown_as_the_docs_write_them() -> None:
    by_name = knobs.by_name(SERVE_KNOBS)
    assert by_name["port"].shown_default() == "7431"
    assert by_name["ping_interval"].shown_default() == "15"
    assert by_name["stream_lifetime"].shown_default() == "none"
    assert by_name["repair_schema"].shown_default() == "off"
    assert by_name["data_dir"].shown_default() == "platform default"
    flag = Knob("start_hub", True, env=None, help="h", flag="--no-start-hub", is_flag=True, flag_value=False)
    assert flag.shown_default() == "off"


def test_a_table_refuses_a_knob_declared_twice() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        knobs.table(BoardSettings, Knob("port", 1, env=None, help="again"))


# -- a real board started with the knobs in its environment ---------------------------------------


@pytest.fixture
def taskd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TaskdProcess]:
    # The board's own variables, exported the way a unit file or a shell would.
    monkeypatch.setenv("TASKLOOM_BOARD_DEFAULT_ACTOR", "claude:resident")
    monkeypatch.setenv("TASKLOOM_BOARD_CLAIM_STALE", "0")
    process = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0


async def test_the_default_actor_and_the_claim_windows_are_knobs_of_taskd_serve(taskd: TaskdProcess) -> None:
    async with aiohttp.ClientSession() as session:
        anonymous = BoardClient(taskd.url, taskd.token, session, actor=None)
        # No actor headers: the configured default actor writes (it was 403 ACTOR_REQUIRED).
        task = await make_task(anonymous)
        rows = (await anonymous.get(f"{API}/tasks/{task['identifier']}/activities")).body["items"]
        assert {(row["actor_kind"], row["actor_id"]) for row in rows} == {("claude", "resident")}
        # A claim window of 0 s: the moment the holder's heartbeat is in the past, anyone may take it.
        first = anonymous.as_actor("claude", "worker-1")
        claimed = await first.post(f"{API}/tasks/{task['identifier']}/claim")
        assert claimed.status == 200, claimed.body
        beat = datetime.fromisoformat(claimed.body["heartbeat_at"].replace("Z", "+00:00"))
        wait_until(lambda: datetime.now(UTC) > beat, what="the heartbeat to be in the past")
        taken = await anonymous.as_actor("codex", "worker-2").post(f"{API}/tasks/{task['identifier']}/claim")
        assert taken.status == 200, taken.body  # with the default 6 h window: 409 EXECUTION_ACTIVE
        assert taken.body["claimed_by"] == "worker-2"
