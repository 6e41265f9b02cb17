"""A wheel is a product too: build it, install it into a fresh venv outside the source tree, run it.

Everything a process needs at run time (the board's migrations and static page, the unit templates
``taskctl loop install`` renders) must come from the installed package, not from a checkout. The
fixture builds the wheel from a copy of the tree (so the build leaves nothing in the checkout),
installs it with ``--no-deps`` into a new venv, and lets that venv see the test venv's site-packages
*after* its own through a ``.pth`` line: the runtime dependencies resolve without a network, while
the test venv's editable hook (itself a ``.pth`` file, which a plain path line does not process)
stays inactive, so the source tree is not importable. Every command runs from a directory outside
the source tree with ``PYTHONPATH`` unset.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import sysconfig
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from services.subscriber import units
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
#: Copied into the build tree; everything else (venvs, caches, build output) is left behind.
IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", "node_modules"
)
#: The modules every process imports first; each must load from the new venv.
MODULES = (
    "shared", "services", "taskctl", "services.board.cli", "services.board.store", "services.board.ui",
    "services.hub.cli", "services.subscriber.units", "taskctl.loop_cmd",
)
BUILD_TIMEOUT = 240.0


@dataclass(frozen=True)
class Installed:
    """A venv holding only the wheel, and a working directory outside the source tree."""

    venv: Path
    site_packages: Path
    #: The test venv's site-packages, appended to the new venv's sys.path for the dependencies.
    dependency_paths: tuple[str, ...]
    home: Path
    cwd: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            key: value for key, value in os.environ.items()
            if not key.startswith("TASKLOOM_") and key not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}
        }
        env.update(
            PATH=os.pathsep.join([str(self.bin), "/usr/bin", "/bin"]),
            HOME=str(self.home),
            PYTHONNOUSERSITE="1",
            PYTHONDONTWRITEBYTECODE="1",
            TASKLOOM_NO_AUTOSTART="1",
            XDG_CONFIG_HOME=str(self.home / ".config"),
            XDG_RUNTIME_DIR=str(self.home / "run"),
        )
        env.update(extra)
        return env

    def run(self, *argv: str, timeout: float = 60.0, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), cwd=self.cwd, env=self.env(**env), capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


def _checked(argv: list[str], *, cwd: Path, timeout: float = BUILD_TIMEOUT) -> str:
    env = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "PIP_REQUIRE_VIRTUALENV"}}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("wheel")
    assert not work.resolve().is_relative_to(ROOT), "the install must live outside the source tree"
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=IGNORED)
    dist = work / "dist"
    # With build isolation: pip fetches the build backend pyproject.toml names (as `pip install -e`
    # did for this venv); the venv's own setuptools may be too old to build a wheel.
    _checked([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--quiet", "-w", str(dist)], cwd=work)
    wheels = sorted(dist.glob("taskloom-*.whl"))
    assert len(wheels) == 1, wheels
    shutil.rmtree(source)  # nothing may read the copy after the build

    venv = work / "venv"
    _checked([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=work)
    python = venv / "bin" / "python"
    _checked([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "--quiet",
              str(wheels[0])], cwd=work)
    site_packages = Path(_checked([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  cwd=work).strip())
    # The runtime dependencies (aiohttp, orjson, click, structlog, uvloop) from the test venv, after
    # the wheel's own directory on sys.path.
    ours = tuple(sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}))
    (site_packages / "zz_runtime_dependencies.pth").write_text("".join(f"{path}\n" for path in ours))
    home, cwd = work / "home", work / "elsewhere"
    home.mkdir()
    cwd.mkdir()
    yield Installed(venv=venv, site_packages=site_packages, dependency_paths=ours, home=home, cwd=cwd)


def test_the_installed_code_is_the_wheel_not_the_source_tree(installed: Installed) -> None:
    script = (
        "import importlib, json, sys\n"
        f"files = {{name: importlib.import_module(name).__file__ for name in {MODULES!r}}}\n"
        "finders = [type(finder).__name__ for finder in sys.meta_path]\n"
        "print(json.dumps({'files': files, 'path': sys.path, 'finders': finders}))\n"
    )
    done = installed.run(str(installed.bin / "python"), "-c", script)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for name, file in report["files"].items():
        assert Path(file).is_relative_to(installed.site_packages), f"{name} loaded from {file}"
    # Nothing of the checkout is on sys.path but the dependency directories (the test venv may
    # live inside the checkout), and the editable install's import hook is not installed.
    inside = [entry for entry in report["path"] if entry and Path(entry).resolve().is_relative_to(ROOT)]
    assert set(inside) <= set(installed.dependency_paths), inside
    assert report["path"].index(str(installed.site_packages)) < min(map(report["path"].index, installed.dependency_paths))
    assert not [name for name in report["finders"] if "editable" in name.lower()], report["finders"]
    for script_name in ("taskd", "taskhub", "taskctl"):
        first_line = (installed.bin / script_name).read_text().splitlines()[0]
        assert first_line == f"#!{installed.bin / 'python'}", first_line


def _get(url: str, **headers: str) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback board
        return response.status, response.read(), dict(response.headers)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def _post(url: str, body: dict[str, Any], **headers: str) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json", **headers}
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback board
        return response.status, json.loads(response.read())


def test_taskd_from_the_wheel_applies_its_migrations_and_serves_the_page(installed: Installed, tmp_path: Path) -> None:
    data, runtime = tmp_path / "data", tmp_path / "run"
    log_path = tmp_path / "taskd.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [str(installed.bin / "taskd"), "serve", "--port", "0", "--data-dir", str(data)],
            cwd=installed.cwd, env=installed.env(TASKLOOM_RUNTIME_DIR=str(runtime), TASKLOOM_DATA_DIR=str(data)),
            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        )
    try:
        def pointer() -> str | None:
            if process.poll() is not None:
                raise AssertionError(f"taskd exited with {process.returncode}: {log_path.read_text()}")
            try:
                record = json.loads((runtime / "board.json").read_text())
            except (OSError, ValueError):
                return None
            return str(record["url"]) if record.get("pid") == process.pid else None

        url = wait_until(pointer, timeout=30, what="the installed taskd to write its pointer")

        status, body, _ = _get(f"{url}/health")
        assert (status, json.loads(body)) == (200, {"ok": True})

        status, page, headers = _get(f"{url}/")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert page == (ROOT / "services/board/static/index.html").read_bytes()
        assert b'src="/static/js/app.js"' in page
        for asset in ("js/app.js", "js/live.js", "css/board.css"):
            status, served, _ = _get(f"{url}/static/{asset}")
            assert status == 200 and served == (ROOT / "services/board/static" / asset).read_bytes(), asset

        # The schema came from the wheel's migrations: the newest one in the tree is applied, and
        # the board answers a write with it.
        newest = max(int(path.name.split("_", 1)[0]) for path in (ROOT / "services/board/migrations").glob("*.sql"))
        with sqlite3.connect(data / "board.sqlite") as conn:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == newest
        token = (data / "token").read_text().strip()
        status, created = _post(f"{url}/api/v1/projects", {"id": "wheel"}, Authorization=f"Bearer {token}",
                                **{"X-Taskloom-Actor": "ann", "X-Taskloom-Actor-Kind": "human"})
        assert status == 201 and created["id"] == "wheel"

        # The hub a client starts on demand (`python -m services.hub.cli`) runs from the wheel too.
        hub_env = {"TASKLOOM_RUNTIME_DIR": str(runtime), "TASKLOOM_TOKEN": token}
        follow = installed.run(str(installed.bin / "taskctl"), "events", "follow", "--url", url, "--idle", "0.5", **hub_env)
        assert follow.returncode == 0, follow.stdout + follow.stderr
        records = [json.loads(line)["type"] for line in follow.stdout.splitlines()]
        assert records[0] == "open" and records[-1] == "idle", records
        (pointer_path,) = runtime.glob("hub-*.json")
        hub_pid = json.loads(pointer_path.read_text())["pid"]
        hub_argv = Path(f"/proc/{hub_pid}/cmdline").read_bytes().split(b"\0")
        assert hub_argv[0].decode() == str(installed.bin / "python") and b"services.hub.cli" in hub_argv
        stopped = installed.run(str(installed.bin / "taskctl"), "events", "hub", "--stop", "--url", url, **hub_env)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        wait_until(lambda: not Path(f"/proc/{hub_pid}").exists() or _zombie(hub_pid), timeout=20, what="the hub to exit")
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0, log_path.read_text()


@pytest.mark.parametrize("supervisor", units.SUPERVISORS)
def test_loop_install_dry_run_renders_the_units_from_the_wheel(installed: Installed, tmp_path: Path, supervisor: str) -> None:
    target = tmp_path / "units"
    done = installed.run(
        str(installed.bin / "taskctl"), "--json", "loop", "install", "--supervisor", supervisor, "--dry-run",
        "--with-hub", "--dir", str(target), "--agent", "worker-1", "--on-wake", "true",
        "--data-dir", str(tmp_path / "data"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    reply = json.loads(done.stdout)
    assert reply["ok"] is True, reply
    rendered = {unit["role"]: unit for unit in reply["data"]["units"]}
    assert set(rendered) == {"board", "subscriber", "hub"}
    for role, executable, verb in (("board", "taskd", "serve"), ("hub", "taskhub", "serve"), ("subscriber", "taskctl", "loop")):
        unit = rendered[role]
        assert unit["name"] == units.UNIT_FILES[supervisor][role]
        argv = units.program_argv(supervisor, unit["text"])
        assert argv[:2] == [str(installed.bin / executable), verb], argv
    assert not target.exists(), "--dry-run wrote nothing"
