"""Run the real ``taskctl`` from the venv as a user would, against a real ``taskd`` subprocess.

Every run's stdout and stderr are kept; at teardown each fixture asserts that no captured output
ever held the board token (SPEC §5: never printed).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.board import VENV_BIN, TaskdProcess

TASKCTL = str(VENV_BIN / "taskctl")
#: Inherited variables that would steer taskctl away from the board under test.
STEERING = (
    "TASKLOOM_URL", "TASKLOOM_TOKEN", "TASKLOOM_ACTOR", "TASKLOOM_ACTOR_KIND", "TASKLOOM_PROJECT",
    "TASKLOOM_NO_AUTOSTART", "TASKLOOM_RUNTIME_DIR", "TASKLOOM_DATA_DIR", "XDG_RUNTIME_DIR", "NO_COLOR",
    "TASKLOOM_DEBUG",
)


@dataclass
class Run:
    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)

    def __str__(self) -> str:
        return f"taskctl {' '.join(self.args)} → {self.code}\n--- stdout\n{self.stdout}--- stderr\n{self.stderr}"


@dataclass
class Taskctl:
    """A taskctl with a fixed environment; every run is recorded for the secret check."""

    env: dict[str, str]
    cwd: Path
    runs: list[Run] = field(default_factory=list)

    @property
    def data_dir(self) -> Path:
        return Path(self.env["TASKLOOM_DATA_DIR"])

    def __call__(self, *args: str, input: str | None = None, env: dict[str, str] | None = None,
                 timeout: float = 60.0) -> Run:
        merged = {**self.env, **(env or {})}
        merged = {k: v for k, v in merged.items() if v is not None}
        done = subprocess.run(
            [TASKCTL, *args], input=input, capture_output=True, text=True, env=merged, cwd=self.cwd, timeout=timeout
        )
        run = Run(tuple(args), done.returncode, done.stdout, done.stderr)
        self.runs.append(run)
        return run

    def ok(self, *args: str, **kw: Any) -> Run:
        run = self(*args, **kw)
        assert run.code == 0, str(run)
        return run

    def data(self, *args: str, **kw: Any) -> Any:
        """Run with --json, expect success, return the envelope's data."""
        run = self.ok("--json", *args, **kw)
        envelope = run.json
        assert envelope["ok"] is True, str(run)
        return envelope["data"]

    @contextmanager
    def running(self, *args: str) -> Iterator[subprocess.Popen[str]]:
        """``taskctl ARGS`` started and left running for the test to act on while it runs (read
        its output with ``communicate``); killed at the end if it is still going."""
        process = subprocess.Popen([TASKCTL, *args], env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)

    def refused(self, code: str, *args: str, **kw: Any) -> Run:
        """Run, expect exit 1 naming ``code`` on stderr."""
        run = self(*args, **kw)
        assert run.code == 1, str(run)
        assert f"error: {code}:" in run.stderr, str(run)
        return run

    def assert_no_secret(self, *secrets: str) -> None:
        for run in self.runs:
            for secret in secrets:
                assert secret not in run.stdout and secret not in run.stderr, f"a secret leaked in: {run}"


def base_env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in STEERING}
    # Compiled bytecode in a private cache keeps each run near its real start-up time without
    # writing __pycache__ into the tree.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    env["TASKLOOM_ACTOR"] = "ann"
    env["TASKLOOM_ACTOR_KIND"] = "human"
    return env


@pytest.fixture(scope="session")
def pycache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pycache")


def taskctl_for(process: TaskdProcess, cache: Path, cwd: Path) -> Taskctl:
    env = base_env(cache)
    env["TASKLOOM_RUNTIME_DIR"] = str(process.runtime_dir)
    env["TASKLOOM_DATA_DIR"] = str(process.data_dir)
    # These tests drive a board they started; never let a slip autostart another one.
    env["TASKLOOM_NO_AUTOSTART"] = "1"
    return Taskctl(env, cwd)


@pytest.fixture
def taskctl(taskd: TaskdProcess, pycache: Path, tmp_path: Path) -> Iterator[Taskctl]:
    """taskctl against the function-scoped ``taskd`` fixture, found through its pointer."""
    taskd.start()
    runner = taskctl_for(taskd, pycache, tmp_path)
    yield runner
    runner.assert_no_secret(taskd.token)


@pytest.fixture(scope="module")
def shared_taskd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TaskdProcess]:
    """One board for a module of independent tests (each uses its own project)."""
    root = tmp_path_factory.mktemp("taskd")
    process = TaskdProcess(data_dir=root / "data", runtime_dir=root / "run", log_path=root / "taskd.log")
    process.start()
    yield process
    if process.process is not None and process.process.poll() is None:
        process.stop()


@pytest.fixture(scope="module")
def tc(shared_taskd: TaskdProcess, pycache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Taskctl]:
    """taskctl against the module's shared board; runs in a scratch directory of its own."""
    runner = taskctl_for(shared_taskd, pycache, tmp_path_factory.mktemp("cwd"))
    yield runner
    runner.assert_no_secret(shared_taskd.token)


def activity_count(data_dir: Path) -> int:
    """Rows in the log, read straight from the board's SQLite file."""
    with closing(sqlite3.connect(data_dir / "board.sqlite", timeout=10)) as conn:
        return conn.execute("SELECT count(*) FROM task_activities").fetchone()[0]


_projects = iter(range(1, 10_000))


def new_project(runner: Taskctl, stem: str = "p") -> str:
    """A fresh project for one test on a shared board; returns its id (prefix = upper case)."""
    project_id = f"{stem}{next(_projects)}"
    runner.ok("project", "create", project_id)
    return project_id
