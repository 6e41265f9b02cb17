"""The service units: rendered with this machine's paths, parsed back, verified, installed, removed."""

from __future__ import annotations

import json
import os
import plistlib
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from services.subscriber import units
from tests.support.board import VENV_BIN

TASKCTL = str(VENV_BIN / "taskctl")
#: An --on-wake command with everything a unit file could mangle: quotes, $, %, a backslash.
HARD_COMMAND = 'notify-loop --say "wake up" --home $HOME --at 100% --path C:\\x'
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def values(tmp_path: Path, **overrides: Any) -> units.UnitValues:
    found = units.find_executables()
    fields: dict[str, Any] = dict(
        taskd=found["taskd"],
        taskhub=found["taskhub"],
        taskctl=found["taskctl"],
        port=7431,
        board_url="http://127.0.0.1:7431",
        data_dir=str(tmp_path / "data dir"),
        runtime_dir=str(tmp_path / "run"),
        state_dir=str(tmp_path / "loop state"),
        log_dir=str(tmp_path / "logs"),
        agents=("worker-1", "worker-2"),
        on_wake=HARD_COMMAND,
        director="Director",
        path="/usr/local/bin:/usr/bin:/bin",
    )
    fields.update(overrides)
    return units.UnitValues(**fields)


def expected_subscriber_argv(v: units.UnitValues, *, hub: bool = False) -> list[str]:
    return [
        v.taskctl, "loop", "subscribe", "--agent", "worker-1", "--agent", "worker-2", "--director", "Director",
        "--on-wake", HARD_COMMAND, "--state-dir", v.state_dir, "--url", v.board_url,
        *(["--no-start-hub"] if hub else []),
    ]


def by_role(rendered: list[units.RenderedUnit]) -> dict[str, units.RenderedUnit]:
    return {unit.role: unit for unit in rendered}


# -- rendering -----------------------------------------------------------------------------------


def test_systemd_units_carry_every_argument_exactly(tmp_path: Path) -> None:
    v = values(tmp_path)
    rendered = by_role(units.render("systemd", v))
    assert set(rendered) == {"board", "subscriber"}
    assert units.systemd_exec_argv(rendered["subscriber"].text) == expected_subscriber_argv(v)
    assert units.systemd_exec_argv(rendered["board"].text) == [
        v.taskd, "serve", "--host", "127.0.0.1", "--port", "7431", "--data-dir", v.data_dir,
    ]
    text = rendered["subscriber"].text
    assert f'Environment="TASKLOOM_DATA_DIR={v.data_dir}"' in text
    assert "$$HOME" in text and "100%%" in text  # no expansion, no specifier
    assert "{" not in text.replace("${", "")  # every placeholder filled


def test_with_a_supervised_hub_the_subscriber_waits_for_it(tmp_path: Path) -> None:
    v = values(tmp_path, supervised_hub=True)
    rendered = by_role(units.render("systemd", v, hub=True))
    assert units.systemd_exec_argv(rendered["hub"].text) == [v.taskhub, "serve", "--board", v.board_url, "--idle-exit", "0"]
    assert units.systemd_exec_argv(rendered["subscriber"].text) == expected_subscriber_argv(v, hub=True)
    assert "After=taskloom-board.service taskloom-hub.service" in rendered["subscriber"].text


def test_launchd_plists_parse_and_carry_every_argument(tmp_path: Path) -> None:
    v = values(tmp_path, supervised_hub=True)
    rendered = by_role(units.render("launchd", v, hub=True))
    for unit in rendered.values():
        plist = plistlib.loads(unit.text.encode())
        assert plist["Label"] == unit.name.removesuffix(".plist")
        assert plist["EnvironmentVariables"]["TASKLOOM_RUNTIME_DIR"] == v.runtime_dir
        assert plist["StandardErrorPath"].startswith(v.log_dir)
    subscriber = plistlib.loads(rendered["subscriber"].text.encode())
    assert subscriber["ProgramArguments"] == expected_subscriber_argv(v, hub=True)
    assert subscriber["EnvironmentVariables"]["PATH"] == v.path
    assert subscriber["KeepAlive"] is True
    board = plistlib.loads(rendered["board"].text.encode())
    assert board["ProgramArguments"][0] == v.taskd and v.data_dir in board["ProgramArguments"]


def test_without_a_director_no_director_argument_is_rendered(tmp_path: Path) -> None:
    v = values(tmp_path, director=None)
    for supervisor in units.SUPERVISORS:
        argv = units.program_argv(supervisor, by_role(units.render(supervisor, v))["subscriber"].text)
        assert "--director" not in argv and "" not in argv


def test_a_value_a_unit_cannot_hold_is_refused(tmp_path: Path) -> None:
    with pytest.raises(units.UnitError, match="one line"):
        units.render("systemd", values(tmp_path, on_wake="first\nsecond"))
    with pytest.raises(units.UnitError, match="unknown supervisor"):
        units.render("upstart", values(tmp_path))


def test_systemd_analyze_verifies_the_rendered_units(tmp_path: Path) -> None:
    assert SYSTEMD_ANALYZE, "systemd-analyze is not installed: run make deps (or: sudo apt-get install -y systemd)"
    rendered = units.render("systemd", values(tmp_path, supervised_hub=True), hub=True)
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    for unit in rendered:
        (unit_dir / unit.name).write_text(unit.text)
    assert verify(tmp_path, *(unit_dir / unit.name for unit in rendered)).returncode == 0

    # The same check fails on a unit whose executable does not exist: it is not a rubber stamp.
    broken = values(tmp_path, taskctl=str(tmp_path / "no-such-taskctl"))
    subscriber = by_role(units.render("systemd", broken))["subscriber"]
    bad = tmp_path / "bad" / subscriber.name
    bad.parent.mkdir()
    bad.write_text(subscriber.text)
    done = verify(tmp_path, bad)
    assert done.returncode != 0 and "no-such-taskctl" in done.stderr


def verify(tmp_path: Path, *paths: Path) -> subprocess.CompletedProcess[str]:
    runtime = tmp_path / "xdg-runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "SYSTEMD_LOG_LEVEL": "warning"}
    assert SYSTEMD_ANALYZE is not None
    return subprocess.run([SYSTEMD_ANALYZE, "verify", "--user", *map(str, paths)],
                          check=False, capture_output=True, text=True, env=env, timeout=60)


# -- taskctl loop install / uninstall -----------------------------------------------------------------


def taskctl(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKLOOM_", "XDG_"))}
    env.update(HOME=str(tmp_path / "home"), TASKLOOM_DATA_DIR=str(tmp_path / "data"),
               TASKLOOM_RUNTIME_DIR=str(tmp_path / "run"), TASKLOOM_NO_AUTOSTART="1")
    return subprocess.run([TASKCTL, *args], check=False, capture_output=True, text=True, env=env, timeout=60)


INSTALL_ARGS = ("--agent", "worker-1", "--agent", "worker-2", "--director", "Director", "--on-wake", HARD_COMMAND)


@pytest.mark.parametrize("supervisor", units.SUPERVISORS)
def test_dry_run_points_at_existing_executables_and_writes_nothing(tmp_path: Path, supervisor: str) -> None:
    done = taskctl(tmp_path, "loop", "install", "--supervisor", supervisor, "--with-hub", "--dry-run", "--json",
                   *INSTALL_ARGS)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)["data"]
    assert data["dry_run"] is True and len(data["units"]) == 3
    expected_dir = tmp_path / "home" / (".config/systemd/user" if supervisor == "systemd" else "Library/LaunchAgents")
    assert data["dir"] == str(expected_dir)
    for unit in data["units"]:
        argv = units.program_argv(supervisor, unit["text"])
        assert Path(argv[0]).is_absolute() and os.access(argv[0], os.X_OK), argv
        assert Path(argv[0]).name in {"taskd", "taskhub", "taskctl"}
        assert unit["action"] == "created"
    subscriber = next(unit for unit in data["units"] if unit["role"] == "subscriber")
    argv = units.program_argv(supervisor, subscriber["text"])
    assert argv[argv.index("--on-wake") + 1] == HARD_COMMAND
    assert argv[argv.index("--state-dir") + 1] == str(tmp_path / "data" / "loop")
    assert not (tmp_path / "home").exists()  # nothing written anywhere


def test_install_writes_units_then_uninstall_removes_them(tmp_path: Path) -> None:
    target = tmp_path / "units"
    done = taskctl(tmp_path, "loop", "install", "--supervisor", "systemd", "--dir", str(target), *INSTALL_ARGS)
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in target.iterdir())
    assert names == ["taskloom-board.service", "taskloom-subscriber.service"]
    assert f"created {target / 'taskloom-subscriber.service'}" in done.stdout
    assert "systemctl --user enable --now taskloom-board.service taskloom-subscriber.service" in done.stdout
    assert (tmp_path / "data" / "loop").is_dir()

    again = taskctl(tmp_path, "loop", "install", "--supervisor", "systemd", "--dir", str(target), *INSTALL_ARGS)
    assert again.returncode == 0 and again.stdout.count("unchanged ") == 2

    # What `systemctl --user enable` leaves behind goes too.
    wants = target / "default.target.wants"
    wants.mkdir()
    (wants / "taskloom-subscriber.service").symlink_to(target / "taskloom-subscriber.service")
    gone = taskctl(tmp_path, "loop", "uninstall", "--supervisor", "systemd", "--dir", str(target))
    assert gone.returncode == 0, gone.stderr
    assert "systemctl --user stop" in gone.stdout
    assert sorted(p.name for p in target.iterdir()) == ["default.target.wants"] and not any(wants.iterdir())
    assert "no Taskloom units" in taskctl(tmp_path, "loop", "uninstall", "--dir", str(target)).stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("--supervisor", "upstart", *INSTALL_ARGS), 2, "upstart"),
        (("--on-wake", "notify"), 2, "--agent"),
        (("--agent", "w", "--on-wake", "  "), 2, "must not be empty"),
        (("--agent", "w", "--director", "w", "--on-wake", "notify"), 2, "director"),
        (("--agent", "w", "--on-wake", "first\nsecond"), 1, "INSTALL_FAILED"),
    ],
)
def test_bad_install_input_is_refused_and_writes_nothing(
    tmp_path: Path, args: tuple[str, ...], code: int, message: str
) -> None:
    target = tmp_path / "units"
    done = taskctl(tmp_path, "loop", "install", "--dir", str(target), *args)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    assert not target.exists() and not (tmp_path / "data").exists()
