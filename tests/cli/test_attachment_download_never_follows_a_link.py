"""``taskctl attachment download`` never writes through a symlink, and its file is owner-only.

The download lands on ``<its name>`` in the working directory (or ``--out``), which may be a
directory another uid can write (a team checkout, a scratch directory; Linux's
``fs.protected_symlinks`` guards only sticky world-writable ones such as ``/tmp``). A link
planted there beforehand, dangling so that "does it exist?" says no, made a plain write create
the file the link names -- in the user's home, with the attachment's bytes. The download goes
through the exports' owner-only atomic writer instead: without ``--force`` any existing name, a
dangling link included, is refused; with it, the link itself is replaced by the file.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.board import VENV_BIN, TaskdProcess
from tests.support.other_user import OtherUser, other_user  # noqa: F401 (fixture)

PLANT = r"""
import os, sys
shared, aim = sys.argv[1], sys.argv[2]
os.makedirs(shared, exist_ok=True)
os.chmod(shared, 0o777)
os.symlink(aim, os.path.join(shared, "report.txt"))
print("PLANTED", flush=True)
"""
BYTES = b"echo the attachment's bytes\n"


def test_a_download_refuses_or_replaces_a_link_another_user_planted_and_never_follows_it(
    tmp_path: Path, other_user: OtherUser  # noqa: F811
) -> None:
    board = TaskdProcess(data_dir=tmp_path / "data", runtime_dir=tmp_path / "run", log_path=tmp_path / "taskd.log")
    board.start()
    shared = Path(f"/tmp/taskloom-shared-{tmp_path.name}")
    home = tmp_path / "home"  # stands for the user's home: only the user can write there
    home.mkdir(mode=0o700)
    aim = home / ".profile.d-taskloom"
    env = {**board.env(), "TASKLOOM_URL": board.url, "TASKLOOM_TOKEN": board.token, "TASKLOOM_NO_AUTOSTART": "1"}
    taskctl = str(VENV_BIN / "taskctl")

    def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([taskctl, "--json", *args], env=env, capture_output=True, text=True, timeout=60, cwd=cwd)

    try:
        board.api("POST", "/api/v1/projects", {"id": "demo"})
        board.api("POST", "/api/v1/tasks", {"project": "demo", "title": "Attach"})
        (tmp_path / "report.txt").write_bytes(BYTES)
        uploaded = run("attachment", "upload", "DEMO-0001", str(tmp_path / "report.txt"), cwd=tmp_path)
        assert uploaded.returncode == 0, uploaded.stderr
        attachment_id = json.loads(uploaded.stdout)["data"]["id"]
        planted = other_user.run(PLANT, str(shared), str(aim))
        assert "PLANTED" in planted.stdout, planted.stderr
        link = shared / "report.txt"

        refused = run("attachment", "download", attachment_id, cwd=shared)
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        assert json.loads(refused.stdout)["error"]["code"] == "FILE_EXISTS", refused.stdout
        assert not aim.exists(), f"the download followed {link} and created {aim}"
        assert link.is_symlink(), "a refused download changed the name"

        forced = run("attachment", "download", attachment_id, "--force", cwd=shared)
        assert forced.returncode == 0, (forced.stdout, forced.stderr)
        assert not aim.exists(), f"the download followed {link} and created {aim}"
        assert not link.is_symlink() and link.read_bytes() == BYTES, "the link was not replaced by the file"
        assert oct(link.stat().st_mode & 0o777) == "0o600"
        assert link.stat().st_uid != other_user.uid

        fresh = run("attachment", "download", attachment_id, "--out", str(tmp_path / "fresh.txt"), cwd=tmp_path)
        assert fresh.returncode == 0, fresh.stderr
        assert (tmp_path / "fresh.txt").read_bytes() == BYTES
        assert oct((tmp_path / "fresh.txt").stat().st_mode & 0o777) == "0o600", "a download is owner-only"
        assert sorted(p.name for p in shared.iterdir()) == ["report.txt"], "a temp file was left behind"
    finally:
        subprocess.run(["rm", "-rf", str(shared)], check=False)
        board.stop()
