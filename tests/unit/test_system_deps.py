"""``scripts/ensure-system-deps``: installs what is missing when it may, else stops with the command.

It runs with a PATH of its own here: the real tools it needs plus fakes of ``id`` (to be root or
not) and ``apt-get`` (which records its calls and, when told to, "installs" stand-ins).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
SCRIPT: Final = ROOT / "scripts" / "ensure-system-deps"
#: What the script runs besides the programs it looks for.
TOOLS: Final = ("bash", "grep", "cat", "env")
#: Without them, the packages it must ask for (chromium and python3 are checked at their /usr/bin
#: paths, the real ones).
EXPECTED: Final = ["netcat-openbsd", "nodejs", "systemd", "passwd", "util-linux"]

FAKE_APT = """#!/bin/bash
echo "$*" >> "{log}"
if [ "$1" = install ] && [ -n "{installs}" ]; then
    printf '#!/bin/bash\\necho "  -N  Shutdown the network socket after EOF on stdin"\\n' > "{bin}/nc"
    printf '#!/bin/bash\\n' > "{bin}/node"
    printf '#!/bin/bash\\n' > "{bin}/systemd-analyze"
    printf '#!/bin/bash\\n' > "{bin}/useradd"
    printf '#!/bin/bash\\n' > "{bin}/runuser"
    /bin/chmod +x "{bin}/nc" "{bin}/node" "{bin}/systemd-analyze" "{bin}/useradd" "{bin}/runuser"
fi
"""


def fake_path(tmp_path: Path, *, uid: int, apt: bool, installs: bool = True) -> tuple[Path, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    (bin_dir / "id").write_text(f"#!/bin/bash\necho {uid}\n")
    log = tmp_path / "apt.log"
    if apt:
        (bin_dir / "apt-get").write_text(FAKE_APT.format(log=log, bin=bin_dir, installs="yes" if installs else ""))
    for script in bin_dir.iterdir():
        if not script.is_symlink():
            script.chmod(0o755)
    return bin_dir, log


def run(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(bin_dir / "bash"), str(SCRIPT)], env={"PATH": str(bin_dir)},
                          capture_output=True, text=True, timeout=60)


def test_as_root_with_apt_it_updates_once_then_installs_what_is_missing(tmp_path: Path) -> None:
    assert Path("/usr/bin/chromium").exists(), "run make deps first"
    bin_dir, log = fake_path(tmp_path, uid=0, apt=True)
    done = run(bin_dir)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == ["update -qq", "install -y -qq " + " ".join(EXPECTED)]
    assert run(bin_dir).returncode == 0 and len(log.read_text().splitlines()) == 2, "nothing left to install"


def test_without_root_it_stops_at_once_with_the_exact_command(tmp_path: Path) -> None:
    bin_dir, log = fake_path(tmp_path, uid=1000, apt=True)
    done = run(bin_dir)
    assert done.returncode == 1
    assert f"sudo apt-get update && sudo apt-get install -y {' '.join(EXPECTED)}" in done.stderr
    assert "nodejs: the page's JavaScript units" in done.stderr
    assert not log.exists(), "apt-get must not run without root"


def test_an_install_that_leaves_a_program_missing_fails(tmp_path: Path) -> None:
    bin_dir, _ = fake_path(tmp_path, uid=0, apt=True, installs=False)
    done = run(bin_dir)
    assert done.returncode == 1 and "Still missing after apt-get install" in done.stderr


def test_without_apt_it_names_the_packages_and_fails(tmp_path: Path) -> None:
    bin_dir, _ = fake_path(tmp_path, uid=0, apt=False)
    done = run(bin_dir)
    assert done.returncode == 1 and "not a Debian system" in done.stderr
    assert all(package in done.stderr for package in EXPECTED)


def test_make_test_runs_it_first_and_the_node_suite_always() -> None:
    makefile = (ROOT / "Makefile").read_text()
    test_rule = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert test_rule.split("\n", 1)[0].split() == ["deps", "$(STAMP_TEST)"]
    assert "\tnode --test tests/js/" in test_rule.splitlines()
    assert "scripts/ensure-system-deps" in makefile.split("\ndeps:", 1)[1].split("\n\n", 1)[0]
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-1] == "make test" and not any("apt-get" in line for line in ci)
    assert os.access(SCRIPT, os.X_OK)
