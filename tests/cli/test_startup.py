"""Start-up cost: ``taskctl --help`` and ``taskctl task list`` never import the server stack."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.cli.conftest import Taskctl

PROBE = """
import contextlib, io, json, sys
from taskctl.main import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
heavy = sorted(
    name for name in sys.modules
    if name.split(".")[0] in ("aiohttp", "structlog", "aiosqlite", "uvloop", "orjson", "multidict", "yarl")
    or name in ("services.board.app", "services.board.store", "services.board.api", "sqlite3", "asyncio")
)
print(json.dumps({"code": code, "heavy": heavy}))
"""


@pytest.mark.parametrize(
    ("argv", "code"), [(["--help"], 0), (["task", "list"], 0), (["--json", "task", "show", "NOPE-0001"], 1)]
)
def test_common_commands_import_no_server_stack(tc: Taskctl, argv: list[str], code: int) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=tc.env, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["code"] == code
    assert report["heavy"] == [], f"taskctl {' '.join(argv)} imported {report['heavy']}"
