"""The suite's throwaway PostgreSQL: found where Debian puts it, failing loudly when it is not there."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import psycopg
import pytest

from tests.support.postgres import SERVER_PROGRAMS, Cluster, PostgresMissing, find_binaries


def fake_installation(bindir: Path, programs: tuple[str, ...] = SERVER_PROGRAMS) -> Path:
    bindir.mkdir(parents=True)
    for name in programs:
        program = bindir / name
        program.write_text("#!/bin/sh\nexit 1\n")
        program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return bindir


def test_the_newest_debian_installation_is_found_off_path(tmp_path: Path) -> None:
    root = tmp_path / "postgresql"
    fake_installation(root / "13" / "bin")
    newest = fake_installation(root / "15" / "bin")
    empty_path = str(tmp_path / "no-bin")
    assert find_binaries(debian_root=root, path=empty_path).bindir == newest


def test_an_installation_missing_one_program_is_passed_over(tmp_path: Path) -> None:
    root = tmp_path / "postgresql"
    fake_installation(root / "16" / "bin", ("initdb", "pg_ctl"))  # no postgres server binary
    complete = fake_installation(root / "15" / "bin")
    assert find_binaries(debian_root=root, path=str(tmp_path / "no-bin")).bindir == complete


def test_programs_on_path_are_found_through_their_links(tmp_path: Path) -> None:
    installation = fake_installation(tmp_path / "opt" / "pg" / "bin")
    links = tmp_path / "links"
    links.mkdir()
    (links / "initdb").symlink_to(installation / "initdb")
    assert find_binaries(debian_root=tmp_path / "none", path=str(links)).bindir == installation


def test_no_postgresql_fails_with_the_command_that_installs_it(tmp_path: Path) -> None:
    with pytest.raises(PostgresMissing) as refused:
        find_binaries(debian_root=tmp_path / "none", path=str(tmp_path / "no-bin"))
    message = str(refused.value)
    assert "apt-get install -y postgresql" in message and "scripts/ensure-system-deps" in message
    assert all(name in message for name in SERVER_PROGRAMS)


def test_the_cluster_listens_on_loopback_only_and_asks_for_the_password(pg_cluster: Cluster) -> None:
    with psycopg.connect(pg_cluster.admin_url) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
        assert conn.execute("SHOW fsync").fetchone() == ("off",)
        assert conn.execute("SELECT current_setting('server_version_num')::int / 10000").fetchone()[0] >= 15  # type: ignore[index]
    wrong = pg_cluster.admin_url.replace("postgres@", "postgres:wrong@", 1)
    assert wrong != pg_cluster.admin_url  # a password given outright wins over the passfile's
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong, connect_timeout=5)
    if os.geteuid() == 0:  # PostgreSQL refuses root: the server runs as the unprivileged user
        owner = pg_cluster.data_dir.stat().st_uid
        assert owner != 0


def test_each_test_database_starts_empty(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
        assert tables == (0,)
        conn.execute("CREATE TABLE scratch (x int)")  # left behind on purpose: the next test must not see it


def test_a_second_test_database_does_not_see_the_first_ones_tables(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT to_regclass('scratch')").fetchone() == (None,)
