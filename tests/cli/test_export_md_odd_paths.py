"""Fixed: before, ``taskctl export md`` reads ``<DIR>/<IDENTIFIER>.md`` before comparing without looking
at what the path is. A directory there crashes the command as INTERNAL (a traceback hint, no
word about the path); a FIFO there hangs it forever. ``export watch`` checks the same paths
(services/hub/briefs.path_problem) and refuses both with VALIDATION_FAILED."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.cli.conftest import Taskctl
from tests.cli.test_mcp import setup_card


def test_a_directory_where_a_brief_goes_is_a_clean_refusal_not_internal(taskctl: Taskctl, tmp_path: Path) -> None:
    setup_card(taskctl)
    out = tmp_path / "export"
    (out / "DEMO-0001.md").mkdir(parents=True)
    for extra in ((), ("--check",)):
        run = taskctl("export", "md", "--out", str(out), *extra)
        assert run.code in (1, 3), str(run)
        assert "INTERNAL" not in run.stderr, f"export md {' '.join(extra)} crashed instead of refusing:\n{run}"


def test_a_fifo_where_a_brief_goes_does_not_hang_export(taskctl: Taskctl, tmp_path: Path) -> None:
    setup_card(taskctl)
    out = tmp_path / "export"
    out.mkdir()
    os.mkfifo(out / "DEMO-0001.md")
    try:
        run = taskctl("export", "md", "--out", str(out), timeout=15)
    except subprocess.TimeoutExpired:
        raise AssertionError("export md blocked reading a FIFO at DEMO-0001.md (no writer ever comes)") from None
    assert run.code == 1 and "VALIDATION_FAILED" in run.stderr, str(run)
