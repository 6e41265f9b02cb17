"""``taskd serve`` refuses an empty ``--host`` or ``--database``, as a script writes them when the
variable it meant is unset: ``taskd serve --host "$HOST"``, ``--database "$DATABASE_URL"``.

An empty host would reach ``create_server(host='')``, which binds every interface (0.0.0.0 and
::), the opposite of the loopback default, and publish ``http://:PORT`` as the board's URL; every
interface is said as ``0.0.0.0`` or ``::``. An empty database would be taken for "no database" and
the board would serve a new, empty board.sqlite instead of the PostgreSQL board it was pointed
at. Both are usage errors naming the option (exit 2), before anything is created.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli.test_time_options_refuse_nan import clean_env, outcome
from tests.support.board import VENV_BIN


@pytest.mark.parametrize("host", ["", " "])
def test_taskd_serve_refuses_an_empty_host(tmp_path: Path, host: str) -> None:
    pointer = tmp_path / "run" / "board.json"
    seen: dict[str, str] = {}
    state, code, text = outcome([str(VENV_BIN / "taskd"), "serve", "--port", "0", "--host", host], clean_env(tmp_path),
                                pointer, tmp_path / "taskd.log", seen)
    published = json.loads(seen["started"])["url"] if "started" in seen else None
    assert state == "exited" and code == 2 and "--host" in text, (
        f"taskd serve --host {host!r} was not refused: it {state}, listening on every interface, and published "
        f"{published!r} as its URL"
    )


def test_taskd_serve_refuses_an_empty_database_url(tmp_path: Path) -> None:
    pointer = tmp_path / "run" / "board.json"
    state, code, text = outcome([str(VENV_BIN / "taskd"), "serve", "--port", "0", "--database", ""],
                                clean_env(tmp_path), pointer, tmp_path / "taskd.log")
    made = sorted(os.listdir(tmp_path / "data")) if (tmp_path / "data").exists() else []
    assert state == "exited" and code == 2 and "--database" in text, (
        f"taskd serve --database '' was not refused: it {state} on SQLite instead ({made} in the data directory)"
    )
    assert made == [], made


def test_taskd_serve_refuses_an_empty_host_in_its_variable(tmp_path: Path) -> None:
    state, code, text = outcome([str(VENV_BIN / "taskd"), "serve", "--port", "0"],
                                {**clean_env(tmp_path), "TASKLOOM_BOARD_HOST": " "},
                                tmp_path / "run" / "board.json", tmp_path / "taskd.log")
    assert state == "exited" and code == 2 and "TASKLOOM_BOARD_HOST" in text, (state, code, text[-500:])
