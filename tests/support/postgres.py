"""A throwaway PostgreSQL cluster for the tests: no docker, no shared server.

``initdb`` into a temp dir, ``pg_ctl start`` on a free loopback port with the socket in that dir,
durability off (the cluster dies with the session), and an empty database per test made from
``template0``. When the suite runs as root (CI), the server runs as the unprivileged ``postgres``
user Debian's package creates, through ``runuser``: PostgreSQL refuses to run as root.

A missing PostgreSQL fails the tests that need it with the command that installs it; it never
skips them (tests/support/no_skips.py).
"""

from __future__ import annotations

import atexit
import os
import pwd
import queue
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

INSTALL = (
    "PostgreSQL's server programs are needed: run `scripts/ensure-system-deps` (as root it installs "
    "Debian's `postgresql`), or `sudo apt-get update && sudo apt-get install -y postgresql`"
)
#: The programs a cluster needs, all from one installation.
SERVER_PROGRAMS = ("initdb", "pg_ctl", "postgres")
#: PostgreSQL will not run as root; as root the cluster runs as this user (Debian's package makes it).
UNPRIVILEGED_USER = "postgres"
START_TIMEOUT_S = 60
START_ATTEMPTS = 5
SUPERUSER = "postgres"
#: Fast and throwaway: nothing here needs to survive a crash of the machine.
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "32MB",
}


class PostgresMissing(RuntimeError):
    """No usable PostgreSQL server installation on this machine."""


@dataclass(frozen=True)
class PgBinaries:
    """One installation's server programs, and a ``psql`` (Debian puts it in the same dir)."""

    bindir: Path
    psql: Path | None

    def program(self, name: str) -> Path:
        return self.bindir / name


def _version_key(path: Path) -> tuple[int, ...]:
    # /usr/lib/postgresql/<major>/bin: the newest major first.
    return tuple(int(part) for part in re.findall(r"\d+", path.parent.name)) or (0,)


#: Where Debian's `postgresql-<major>` packages put the server programs: <root>/<major>/bin.
DEBIAN_ROOT = Path("/usr/lib/postgresql")


def candidate_bindirs(*, debian_root: Path = DEBIAN_ROOT, path: str | None = None) -> list[Path]:
    """Where PostgreSQL's programs may be, most specific first: pg_config, Debian's tree, PATH."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config", path=path)
    if pg_config:
        result = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if result.returncode == 0 and result.stdout.strip():
            candidates.append(Path(result.stdout.strip()))
    candidates.extend(sorted(debian_root.glob("*/bin"), key=_version_key, reverse=True))
    for name in SERVER_PROGRAMS:
        found = shutil.which(name, path=path)
        if found:
            # /usr/local/bin/initdb may be a link into the installation; its programs sit there.
            candidates.append(Path(found).resolve().parent)
            candidates.append(Path(found).parent)
    unique: list[Path] = []
    for candidate in candidates:
        if candidate not in unique:
            unique.append(candidate)
    return unique


def find_binaries(*, debian_root: Path = DEBIAN_ROOT, path: str | None = None) -> PgBinaries:
    """The first directory holding every server program; :class:`PostgresMissing` says how to install."""
    searched = candidate_bindirs(debian_root=debian_root, path=path)
    for bindir in searched:
        if all(os.access(bindir / name, os.X_OK) for name in SERVER_PROGRAMS):
            psql = bindir / "psql"
            fallback = shutil.which("psql", path=path)
            return PgBinaries(bindir, psql if os.access(psql, os.X_OK) else Path(fallback) if fallback else None)
    where = ", ".join(str(candidate) for candidate in searched) or "nothing (no pg_config, no Debian tree, none on PATH)"
    raise PostgresMissing(f"no PostgreSQL server programs ({', '.join(SERVER_PROGRAMS)}) found; looked in {where}. {INSTALL}")


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Cluster:
    """One running throwaway cluster; ``start()`` then ``url(dbname)``; ``stop()`` removes it all."""

    binaries: PgBinaries
    #: Server settings beside ``SERVER_SETTINGS`` (a bench's statement counter, for one).
    settings: dict[str, str] = field(default_factory=dict)
    base: Path = field(init=False)
    port: int = field(init=False, default=0)
    password: str = field(init=False, default_factory=lambda: secrets.token_hex(16))
    _admin: psycopg.Connection[tuple[object, ...]] | None = field(init=False, default=None)
    _admin_lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _running: bool = field(init=False, default=False)
    #: Databases a finished test no longer needs, dropped off the test's path (a drop takes ~0.1 s).
    _drops: queue.SimpleQueue[str | None] = field(init=False, default_factory=queue.SimpleQueue)
    _dropper: threading.Thread | None = field(init=False, default=None)

    @property
    def data_dir(self) -> Path:
        return self.base / "data"

    @property
    def log_path(self) -> Path:
        return self.base / "server.log"

    @property
    def admin_url(self) -> str:
        return self.url("postgres")

    def url(self, dbname: str) -> str:
        """No password in it: every client finds it in the cluster's passfile (``PGPASSFILE``), as
        an operator's would, and ``taskd serve --database`` refuses a URL holding one."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def _write_passfile(self) -> None:
        """The password for libpq, in an owner-only passfile this process's clients and the boards
        and benches it starts read through ``PGPASSFILE``."""
        passfile = self.base / "pgpass"
        passfile.write_text(f"127.0.0.1:{self.port}:*:{SUPERUSER}:{self.password}\n", encoding="utf-8")
        passfile.chmod(0o600)  # libpq ignores a passfile others may read
        os.environ["PGPASSFILE"] = str(passfile)

    # -- running the server's programs ----------------------------------------------------------

    def _as_server_user(self, argv: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return argv
        try:
            pwd.getpwnam(UNPRIVILEGED_USER)
        except KeyError:
            raise PostgresMissing(
                f"running as root, the test cluster must run as the unprivileged user {UNPRIVILEGED_USER!r}, "
                f"which does not exist. {INSTALL} (its package creates the user)"
            ) from None
        if not shutil.which("runuser"):
            raise PostgresMissing("running as root, the test cluster needs `runuser` (Debian's util-linux) to drop privileges")
        return ["runuser", "-u", UNPRIVILEGED_USER, "--", *argv]

    def _run(self, argv: list[str], *, what: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            self._as_server_user(argv), cwd=self.base, capture_output=True, text=True, check=False, timeout=120
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"{what} failed (exit {result.returncode}): {' '.join(argv)}\n{result.stdout}{result.stderr}")
        return result

    def _chown_to_server_user(self, path: Path) -> None:
        if os.geteuid() == 0:
            entry = pwd.getpwnam(UNPRIVILEGED_USER)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="taskloom-pg-"))
        atexit.register(self.stop)
        self._chown_to_server_user(self.base)
        password_file = self.base / "password"
        password_file.write_text(self.password + "\n", encoding="utf-8")
        password_file.chmod(0o600)
        self._chown_to_server_user(password_file)
        self._run(
            [
                str(self.binaries.program("initdb")), "--pgdata", str(self.data_dir), "--username", SUPERUSER,
                "--pwfile", str(password_file), "--auth-host=scram-sha-256", "--auth-local=peer",
                "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions",
            ],
            what="initdb",
        )
        password_file.unlink()
        settings = {**SERVER_SETTINGS, **self.settings, "unix_socket_directories": f"'{self.base}'"}
        with open(self.data_dir / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n# the test suite's throwaway cluster\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        failures: list[str] = []
        for _ in range(START_ATTEMPTS):
            # A free port can be taken between the probe and the bind: then pg_ctl fails and we retry.
            self.port = free_loopback_port()
            result = self._run(
                [
                    str(self.binaries.program("pg_ctl")), "--pgdata", str(self.data_dir), "--log", str(self.log_path),
                    "--options", f"-p {self.port}", "--wait", "--timeout", str(START_TIMEOUT_S), "start",
                ],
                what="pg_ctl start",
                check=False,
            )
            if result.returncode == 0:
                self._running = True
                self._write_passfile()
                self._wait_until_accepting()
                return
            failures.append(f"port {self.port}: {result.stdout}{result.stderr}{self._log_tail()}")
        raise RuntimeError("the test PostgreSQL cluster did not start:\n" + "\n".join(failures))

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-20:])
        except OSError:
            return ""

    def _wait_until_accepting(self) -> None:
        """pg_ctl --wait returned once the postmaster said ready; confirm over TCP, with a deadline."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                self._admin = psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5)
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the test cluster did not accept connections: {exc}\n{self._log_tail()}") from exc
                time.sleep(0.02)  # polling a condition with a deadline, not synchronising on time

    def drop_later(self, url: str) -> None:
        """Drop a test's database in the background; ``stop()`` waits for the queue to drain."""
        if self._dropper is None:
            self._dropper = threading.Thread(target=self._drop_queued, name="pg-test-dropper", daemon=True)
            self._dropper.start()
        self._drops.put(url)

    def _drop_queued(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            while (url := self._drops.get()) is not None:
                name = urlsplit(url).path.lstrip("/")
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def stop(self) -> None:
        if self._dropper is not None:
            self._drops.put(None)
            self._dropper.join(timeout=60)
            self._dropper = None
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        if self._running:
            self._running = False
            self._run(
                [str(self.binaries.program("pg_ctl")), "--pgdata", str(self.data_dir), "--mode", "immediate", "--wait", "stop"],
                what="pg_ctl stop",
                check=False,
            )
        if getattr(self, "base", None) is not None and self.base.exists():
            shutil.rmtree(self.base, ignore_errors=True)

    # -- databases --------------------------------------------------------------------------------

    def admin(self, statement: sql.Composed) -> None:
        """One statement on the maintenance database, autocommit (CREATE/DROP DATABASE need it)."""
        with self._admin_lock:
            if self._admin is None:
                raise RuntimeError("the test cluster is not running")
            self._admin.execute(statement)

    def psql(self, url: str, statement: str) -> subprocess.CompletedProcess[str]:
        """Run one statement through the real ``psql`` client, as an operator would."""
        if self.binaries.psql is None:
            raise PostgresMissing(f"no psql found next to {self.binaries.bindir} or on PATH. {INSTALL}")
        parts = urlsplit(url)
        # A password goes in the environment, not on a command line other users' `ps` shows.
        env = {**os.environ, **({"PGPASSWORD": parts.password} if parts.password else {})}
        bare = parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}").geturl()
        return subprocess.run(
            [str(self.binaries.psql), "--no-psqlrc", "--quiet", "--set", "ON_ERROR_STOP=1", "--dbname", bare,
             "--command", statement],
            capture_output=True, text=True, check=False, timeout=60, env=env,
        )


def fresh_database(cluster: Cluster) -> str:
    """A new empty database (from template0, so nothing a test left in template1 leaks); its URL."""
    name = f"t_{secrets.token_hex(6)}"
    cluster.admin(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    return cluster.url(name)


def copy_database(cluster: Cluster, template_url: str) -> str:
    """A new database copied from another (migrated, seeded) one, which must have no open connection."""
    name = f"t_{secrets.token_hex(6)}"
    template = urlsplit(template_url).path.lstrip("/")
    cluster.admin(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)))
    return cluster.url(name)


def drop_database(cluster: Cluster, url: str) -> None:
    """Drop a database :func:`fresh_database` made, closing whatever still holds it."""
    name = urlsplit(url).path.lstrip("/")
    cluster.admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def cut_off(admin_url: str, url: str) -> None:
    """The server goes away for the database of ``url``: every session is terminated, new ones refused."""
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(sql.Identifier(name)))
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))


def let_back(admin_url: str, url: str) -> None:
    """The database :func:`cut_off` took away takes sessions again."""
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS true").format(sql.Identifier(name)))


def migration_files() -> list[tuple[int, str, str]]:
    """The PostgreSQL migrations shipped with the board, in order: (number, file name, SQL)."""
    folder = resources.files("services.board") / "migrations" / "postgresql"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            found.append((int(entry.name.split("_", 1)[0]), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


def apply_migrations(url: str, *, upto: int | None = None) -> None:
    """Apply the PostgreSQL migration files in order, each in its own transaction (as shipped)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for number, _, script in migration_files():
            if upto is not None and number > upto:
                break
            with conn.transaction():
                conn.execute(script.encode())  # no parameters: sent as one simple-protocol script


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """The session's throwaway PostgreSQL cluster, started on first use."""
    try:
        cluster = Cluster(find_binaries())
        cluster.start()
    except PostgresMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(pg_cluster: Cluster) -> Iterator[str]:
    """A fresh empty database on the session cluster (no schema: the store's migrate makes it)."""
    url = fresh_database(pg_cluster)
    try:
        yield url
    finally:
        pg_cluster.drop_later(url)
