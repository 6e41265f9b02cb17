"""The board's knobs: ``BoardSettings`` is the table of ``taskd serve`` (docs/operations.md).

Every field with a ``knob`` is a ``taskd serve`` option and a ``TASKLOOM_BOARD_*`` variable; its
default here is the only one. ``data_dir`` is resolved at start (``--data-dir``, else
``TASKLOOM_DATA_DIR``, else the platform default) and ``--repair-schema`` is an action, not a
setting, so both are rows of their own in ``SERVE_KNOBS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import click

from shared import limits
from shared.domain import CLAIM_FRESH_SECONDS, CLAIM_STALE_SECONDS, ROLE_WORDS
from shared.knobs import Knob, Seconds, knob, table
from shared.paths import BOARD_PORT

from . import auth
from .store import Actor, StoreUnreachable

#: The only default kind of a default actor, as for a client that names none (SPEC §4.1).
HUMAN: Final = "human"
SYSTEM: Final = "system"


if TYPE_CHECKING:
    # click 8.4 made ParamType generic; older releases, which pyproject allows, cannot subscript it.
    _ActorParamBase = click.ParamType[Actor]
else:
    _ActorParamBase = click.ParamType


class ActorParam(_ActorParamBase):
    """``ID`` (kind ``human``) or ``KIND:ID``: the actor of writes that name none (SPEC §4.1)."""

    name = "actor"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Actor:
        if isinstance(value, Actor):
            return value
        kind, _, actor_id = str(value).rpartition(":")
        kind, actor_id = (kind.strip() or HUMAN), actor_id.strip()
        if not actor_id:
            self.fail("name the actor: ID or KIND:ID", param, ctx)
        if len(actor_id) > limits.ACTOR_ID_MAX_CHARS or len(kind) > limits.ACTOR_KIND_MAX_CHARS:
            self.fail(f"at most {limits.ACTOR_ID_MAX_CHARS} characters of id and {limits.ACTOR_KIND_MAX_CHARS} of kind",
                      param, ctx)
        if kind.lower() in ROLE_WORDS:
            self.fail(f"{kind!r} is a role, not a kind: name the platform (claude, codex, …) or human", param, ctx)
        if kind == SYSTEM:
            self.fail("system is the board's own actor; a default actor is a person or an agent", param, ctx)
        return Actor(kind, actor_id)


if TYPE_CHECKING:
    _TextParamBase = click.ParamType[str]
else:
    _TextParamBase = click.ParamType


class HostParam(_TextParamBase):
    """The address to bind. An empty one (``--host "$UNSET"``) would bind every interface, the
    opposite of the loopback default, and publish ``http://:PORT``: every interface is said as
    ``0.0.0.0`` or ``::``."""

    name = "host"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text.strip():
            self.fail("is empty: name the address to bind (0.0.0.0 or :: for every interface)", param, ctx)
        return text


class DatabaseUrlParam(_TextParamBase):
    """A ``postgresql://`` URL, checked as the option is read: an empty one (``--database
    "$UNSET"``) would otherwise serve a new, empty board.sqlite instead of the database meant."""

    name = "url"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text.strip():
            self.fail("is empty: give a postgresql://host:port/dbname URL, or leave the option out for "
                      "board.sqlite in the data directory", param, ctx)
        from .postgres_store import check_url, holds_password  # psycopg is loaded only by a board that uses it

        try:
            check_url(text)
        except StoreUnreachable as exc:
            self.fail(str(exc), param, ctx)
        given_as_argument = ctx is not None and param is not None and param.name is not None and \
            ctx.get_parameter_source(param.name) is click.core.ParameterSource.COMMANDLINE
        if given_as_argument and holds_password(text):
            # As taskctl refuses a token value on its command line: argv is every local user's to
            # read (ps, /proc/<pid>/cmdline), for as long as the board runs. The URL is not echoed.
            self.fail("holds a password, which every local user can read on a command line (ps): give the URL "
                      "in TASKLOOM_DATABASE_URL, or the password in a passfile (~/.pgpass, PGPASSFILE)", param, ctx)
        return text


SECONDS = Seconds(min=0.01)
#: ``taskd serve --durability``: the values of SQLite's ``synchronous`` pragma offered.
DURABILITY_LEVELS: Final = ("full", "normal")


@dataclass(frozen=True)
class BoardSettings:
    data_dir: Path
    host: str = knob("127.0.0.1", env="TASKLOOM_BOARD_HOST", type=HostParam(),
                     help="Address to bind (loopback by default; 0.0.0.0 or :: for every interface).")
    port: int = knob(BOARD_PORT, env="TASKLOOM_BOARD_PORT", type=click.IntRange(0, 65535), help="0 picks a free port.")
    #: Extra Host header names accepted besides loopback (the DNS-rebinding guard).
    allowed_hosts: tuple[str, ...] = knob(
        (), env="TASKLOOM_BOARD_ALLOW_HOST", flag="--allow-host", multiple=True, metavar="NAME",
        help="Extra Host header name to accept (DNS-rebinding guard); repeat, or spaces in the variable.",
    )
    #: The actor of a write that names none (SPEC §4.1); None: such a write is 403 ACTOR_REQUIRED.
    default_actor: Actor | None = knob(
        None, env="TASKLOOM_BOARD_DEFAULT_ACTOR", type=ActorParam(), metavar="[KIND:]ID",
        help="Actor of writes that send no X-Taskloom-Actor (kind human unless given); default: refuse them.",
    )
    max_streams: int = knob(1024, env="TASKLOOM_BOARD_MAX_STREAMS", type=click.IntRange(min=1),
                            help="Live streams at once.")
    ping_interval: float = knob(15.0, env="TASKLOOM_BOARD_PING_INTERVAL", type=SECONDS, help="Seconds between SSE pings.")
    retry_ms: int = knob(1000, env="TASKLOOM_BOARD_RETRY_MS", type=click.IntRange(min=0), hidden=True,
                         help="The SSE retry: field, milliseconds.")
    stream_lifetime: float | None = knob(None, env="TASKLOOM_BOARD_STREAM_LIFETIME", type=SECONDS,
                                         help="End each SSE stream after this many seconds (default: never).")
    #: How often another process's commits are looked for (PRAGMA data_version), seconds.
    external_poll_interval: float = knob(
        0.05, env="TASKLOOM_BOARD_POLL_INTERVAL", flag="--poll-interval", type=SECONDS, hidden=True,
        help="Seconds between looks for commits made by another process.",
    )
    #: The claim windows of SPEC §4.2: fresh (others get 409), then only the holder, then anyone.
    claim_fresh_seconds: float = knob(
        float(CLAIM_FRESH_SECONDS), env="TASKLOOM_BOARD_CLAIM_FRESH", flag="--claim-fresh", type=Seconds(min=0),
        help="Seconds after its last heartbeat that a claim is fresh (others get 409 EXECUTION_ACTIVE).",
    )
    claim_stale_seconds: float = knob(
        float(CLAIM_STALE_SECONDS), env="TASKLOOM_BOARD_CLAIM_STALE", flag="--claim-stale", type=Seconds(min=0),
        help="Seconds after its last heartbeat that anyone may take a claim (an audited steal).",
    )
    archive_quiet_seconds: float = knob(
        0.0, env="TASKLOOM_BOARD_ARCHIVE_QUIET", flag="--archive-quiet", type=Seconds(min=0), hidden=True,
        help="Seconds a task must have been quiet before it may be archived.",
    )
    #: Connection deadlines, seconds (services/board/connections.py): idle keep-alive, a request
    #: head from its first byte, a request body between two reads.
    idle_timeout: float = knob(30.0, env="TASKLOOM_BOARD_IDLE_TIMEOUT", type=SECONDS,
                               help="Close a keep-alive connection idle this many seconds.")
    header_timeout: float = knob(10.0, env="TASKLOOM_BOARD_HEADER_TIMEOUT", type=SECONDS,
                                 help="Seconds a request head may take from its first byte.")
    body_timeout: float = knob(30.0, env="TASKLOOM_BOARD_BODY_TIMEOUT", type=SECONDS,
                               help="Seconds a request body may go without progress.")
    #: Descriptors kept free for /health and ordinary requests: new streams are refused below
    #: this many free, idle connections are closed below half of it.
    descriptor_reserve: int = knob(128, env="TASKLOOM_BOARD_DESCRIPTOR_RESERVE", type=click.IntRange(min=8),
                                   help="File descriptors kept for /health and ordinary requests.")
    #: The browser session's sliding idle limit and its absolute limit (auth.py).
    session_idle_seconds: float = knob(
        auth.SESSION_IDLE_SECONDS, env="TASKLOOM_BOARD_SESSION_IDLE", flag="--session-idle",
        type=Seconds(min=1), help="Seconds a browser session may go unused before the board refuses it.",
    )
    session_absolute_seconds: float = knob(
        auth.SESSION_ABSOLUTE_SECONDS, env="TASKLOOM_BOARD_SESSION_MAX_AGE", flag="--session-max-age",
        type=Seconds(min=1), help="Seconds after its login that any browser session ends.",
    )
    #: SQLite's ``synchronous`` pragma: ``full`` fsyncs the WAL at every commit (group commit pays
    #: it once per batch), so an acknowledged write survives a power cut; ``normal`` may lose the
    #: last commits then, in exchange for speed (docs/operations.md, "Durability").
    durability: str = knob(
        "full", env="TASKLOOM_BOARD_DURABILITY", type=click.Choice(DURABILITY_LEVELS),
        help="full: every acknowledged commit survives a power cut; normal: faster, may lose the last ones.",
    )
    #: Seconds between two runs of the retention compaction (when event_retention_days is set).
    compaction_interval: float = knob(
        86400.0, env="TASKLOOM_BOARD_COMPACTION_INTERVAL", type=SECONDS, hidden=True,
        help="Seconds between retention compactions (only when event_retention_days is set).",
    )

    database: str | None = knob(
        None, env="TASKLOOM_DATABASE_URL", type=DatabaseUrlParam(), metavar="URL",
        help="postgresql://… URL: serve that PostgreSQL database (several boards may serve one) instead of "
             "board.sqlite in the data directory.",
    )

    @property
    def database_path(self) -> Path:
        return self.data_dir / "board.sqlite"

    @property
    def database_label(self) -> str:
        """Where the board's state is, for status answers and logs: the file, or the URL without its credentials."""
        if not self.database:
            return str(self.database_path)
        url = urlsplit(self.database)
        host = url.hostname or "localhost"
        return f"{url.scheme}://{host}{f':{url.port}' if url.port else ''}{url.path}"

    @property
    def token_path(self) -> Path:
        return self.data_dir / "token"

    @property
    def attachments_dir(self) -> Path:
        return self.data_dir / "attachments"

    @property
    def revoked_sessions_path(self) -> Path:
        return self.data_dir / "revoked-sessions.json"


DATA_DIR: Final = Knob(
    "data_dir", None, env="TASKLOOM_DATA_DIR", type=click.Path(file_okay=False, path_type=Path),
    default_text="platform default", help="Where board.sqlite and the token live.",
)
#: An action: a variable left set would repair at every start without anyone asking.
REPAIR_SCHEMA: Final = Knob(
    "repair_schema", False, env=None, is_flag=True,
    help="Put back the triggers the migrations define that the database lacks or has disabled, then serve.",
)
#: ``taskd serve``'s table, in ``--help`` order.
SERVE_KNOBS: Final = table(DATA_DIR, BoardSettings, REPAIR_SCHEMA)
