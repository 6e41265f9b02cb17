"""An upgrade of a SQLite board on a disk that fills up part of the way.

A generation-1 file with real rows (tests/support/old_schema.py) plus 1500 cards with long
descriptions, so that the later migrations (0003 and 0006 rewrite every card, 0007 builds the
search index) need megabytes, on a size-limited tmpfs filled until only a few megabytes are left.
The start must fail with one line naming the full disk and leave the file as it was: readable,
whole, at its old version.

The database's ``-wal`` and ``-shm`` are part of it: the WAL can hold committed pages that a
failed checkpoint copied half-way into the file, so a failed start that removed "what it created"
would leave a corrupt file. The pending migrations run as one transaction, so the file is either
upgraded whole or left at its old version, and the one line names the full disk.

Mounting needs root (or CAP_SYS_ADMIN), as for tests/security/test_disk_full.py.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import string
import subprocess
from contextlib import closing
from pathlib import Path

from tests.support.board import VENV_BIN
from tests.support.disks import fill, tmpfs
from tests.support.old_schema import build_source_board, make_old_file

#: What is left free on the disk when the upgrade starts, bytes (a few sizes: where the upgrade
#: stops depends on how much it needs; each must leave the file whole).
LEFT_FREE = (3_000_000, 6_000_000)


def add_bulk_cards(path: Path) -> None:
    rng = random.Random(1)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO projects (id, name, prefix, created_at, updated_at)"
                     " VALUES ('bulk', 'Bulk', 'BULK', '2024-01-01T00:00:00.000Z', '2024-01-01T00:00:00.000Z')")
        for n in range(1500):
            text = "".join(rng.choices(string.ascii_letters + " ", k=1500))
            conn.execute(
                "INSERT INTO tasks (id, project_id, number, identifier, title, description, created_at, updated_at)"
                " VALUES (?, 'bulk', ?, ?, ?, ?, '2024-01-01T00:00:00.000Z', '2024-01-01T00:00:00.000Z')",
                (f"bulk-{n}", n + 1, f"BULK-{n + 1:04d}", f"Bulk card {n}", text),
            )
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def state_of(path: Path) -> tuple[object, ...]:
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            return (conn.execute("PRAGMA user_version").fetchone()[0],
                    conn.execute("PRAGMA integrity_check").fetchone()[0],
                    conn.execute("SELECT count(*) FROM tasks").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        return ("unreadable", str(exc), None)


async def test_an_upgrade_on_a_disk_that_fills_up_leaves_the_file_whole_at_its_old_version(tmp_path: Path) -> None:
    source = await build_source_board(tmp_path / "source")
    template = tmp_path / "template" / "board.sqlite"
    make_old_file(source, template, 1)
    add_bulk_cards(template)
    old_state = state_of(template)
    assert old_state[:2] == (1, "ok")
    outcomes = {}
    for left in LEFT_FREE:
        disk = tmp_path / f"disk-{left}"
        with tmpfs(disk, "24m"):
            data_dir = disk / "data"
            data_dir.mkdir(mode=0o700)
            shutil.copyfile(template, data_dir / "board.sqlite")
            shutil.copyfile(tmp_path / "source" / "token", data_dir / "token")
            filler = fill(disk)
            os.truncate(filler, filler.stat().st_size - left)
            env = {key: value for key, value in os.environ.items() if not key.startswith("TASKLOOM_")}
            env["TASKLOOM_RUNTIME_DIR"] = str(tmp_path / f"run-{left}")
            done = subprocess.run(
                [str(VENV_BIN / "taskd"), "serve", "--port", "0", "--data-dir", str(data_dir)],
                env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False,
            )
            lines = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
            outcomes[left] = (done.returncode, lines, state_of(data_dir / "board.sqlite"), sorted(os.listdir(data_dir)))
    for left, (code, lines, state, _) in outcomes.items():
        assert code == 1 and lines, (left, outcomes[left])
        assert state[1] == "ok", f"with {left} bytes free the failed upgrade left an unreadable file ({state}); said {lines}"
        assert state == old_state, (
            f"with {left} bytes free the failed upgrade left the file at {state} (was {old_state}); said {lines}"
        )
        assert "no space left" in lines[0].lower() or "full" in lines[0].lower(), (
            f"with {left} bytes free the error does not say the disk is full: {lines[0]!r}"
        )
