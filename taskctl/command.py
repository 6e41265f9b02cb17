"""What every taskctl command shares: the global options, the board connection, the printer.

The options ``--url --token-file --token --actor --actor-kind --json`` are accepted both before
the group (``taskctl --json task list``) and on every command (``taskctl task list --json``); the
command's own value wins. The token never rides in ``argv``, which every local user can read
(``ps``, ``/proc/<pid>/cmdline``): ``--token-file FILE`` reads it from a file and ``--token -``
(or ``--token-file -``) from stdin; a token value after ``--token`` is refused before anything
else runs. A command reads them through :func:`current`:

    inv = current()
    task = inv.call("GET", f"/api/v1/tasks/{segment(ref)}")
    inv.out.result(task, render)

``inv.board()`` resolves (and may autostart) the board only when a command first needs it.
"""

from __future__ import annotations

import json as jsonlib
import re
import sys
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click

from shared import limits

from .actors import Actor, resolve_actor
from .discovery import Board, read_given_token, resolve_board
from .errors import TaskctlError
from .http import BoardHttp
from .output import Output

API = "/api/v1"
_META_KEY = "taskloom.invocation"
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


@dataclass
class Invocation:
    url: str | None = None
    token: str | None = field(default=None, repr=False)
    #: The file the token was read from (``--token-file FILE``), which a long-running command reads again.
    token_path: Path | None = None
    actor: str | None = None
    actor_kind: str | None = None
    json: bool = False
    _board: Board | None = field(default=None, repr=False)
    _http: BoardHttp | None = field(default=None, repr=False)
    _out: Output | None = field(default=None, repr=False)

    @property
    def out(self) -> Output:
        if self._out is None or self._out.json != self.json:
            self._out = Output(json=self.json)
        return self._out

    def who(self) -> Actor:
        return resolve_actor(self.actor, self.actor_kind)

    def board(self, *, autostart: bool = True) -> Board:
        if self._board is None:
            self._board = resolve_board(self.url, self.token, autostart=autostart, announce=self.out.note,
                                        token_path=self.token_path)
        return self._board

    def http(self) -> BoardHttp:
        if self._http is None:
            self._http = BoardHttp(self.board(), self.who())
        return self._http

    def call(self, method: str, path: str, json: Any = None, **kw: Any) -> Any:
        """A board request under ``/api/v1``; a refusal raises TaskctlError (exit 1)."""
        return self.http().call(method, API + path, json, **kw)

    def close(self) -> None:
        if self._http is not None:
            self._http.close()


#: The invocation the error handler in ``main`` reads to choose JSON or human error output.
LAST: list[Invocation] = []


def current(ctx: click.Context | None = None) -> Invocation:
    ctx = ctx or click.get_current_context()
    inv = ctx.meta.get(_META_KEY)
    if inv is None:
        inv = ctx.meta[_META_KEY] = Invocation()
        LAST[:] = [inv]
        ctx.call_on_close(inv.close)
    return inv


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    # A flag left off (False) or an option not given (None) keeps what the group level set.
    if value is not None and value is not False:
        setattr(current(ctx), param.name or "", value)
    return value


#: Where to put the board token instead of argv.
TOKEN_SOURCES = "set TASKLOOM_TOKEN, pass --token-file FILE, or pass --token - to read it from stdin"


def _token_from_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    # The refusal never quotes the value: it is the secret this rule keeps out of sight.
    if value is None:
        return None
    if value != "-":
        raise click.BadParameter(
            f"a token on the command line is readable by every local user (ps, /proc/<pid>/cmdline); {TOKEN_SOURCES}",
            ctx=ctx, param=param,
        )
    return _store_token(ctx, param, "-")


def _store_token(ctx: click.Context, param: click.Parameter, source: str | None) -> str | None:
    if source is None:
        return None
    current(ctx).token = _read_token(source, ctx, param)
    current(ctx).token_path = None if source == "-" else Path(source)
    return source


def _read_token(source: str, ctx: click.Context, param: click.Parameter) -> str:
    """The first line of FILE, or of stdin for ``-``, without its surrounding white space."""
    where = "stdin" if source == "-" else source
    try:
        token = sys.stdin.readline().strip() if source == "-" else read_given_token(Path(source))
    except OSError as exc:
        raise click.BadParameter(f"cannot read the token from {where}: {exc.strerror}", ctx=ctx, param=param) from None
    except UnicodeDecodeError:
        raise click.BadParameter(f"the token in {where} is not UTF-8 text", ctx=ctx, param=param) from None
    if not token:
        raise click.BadParameter(f"no token in {where}", ctx=ctx, param=param)
    return token


def global_params() -> list[click.Option]:
    """Fresh instances of the six global options (values land in the invocation)."""
    return [
        click.Option(["--json", "json"], is_flag=True, default=False, expose_value=False, callback=_store, is_eager=True,
                     help='Print {"ok": true, "data": …} or {"ok": false, "error": …} on stdout.'),
        click.Option(["--url"], metavar="URL", expose_value=False, callback=_store,
                     help="Board URL (default: TASKLOOM_URL, the running board's pointer, else autostart)."),
        click.Option(["--token-file"], metavar="FILE|-", expose_value=False, callback=_store_token,
                     help="Read the board token from FILE (- for stdin) (default: TASKLOOM_TOKEN, else the board's "
                          "token file)."),
        click.Option(["--token"], metavar="-", expose_value=False, callback=_token_from_option,
                     help="Only `--token -`: read the board token from stdin. A token value here is refused "
                          "(argv is readable by every local user)."),
        click.Option(["--actor"], metavar="ID", expose_value=False, callback=_store,
                     help="Who is acting (default: TASKLOOM_ACTOR, else your user name)."),
        click.Option(["--actor-kind"], metavar="KIND", expose_value=False, callback=_store,
                     help="The actor's kind: human or a platform name (default: TASKLOOM_ACTOR_KIND, else human)."),
    ]


def global_options(f: F) -> F:
    """Decorator form, for a group or a command defined outside :func:`command`."""
    if isinstance(f, click.Command):
        f.params.extend(global_params())
        return f
    params = getattr(f, "__click_params__", [])
    # click reverses decorator order; prepending keeps them after the command's own options.
    # click keeps a plain function's pending options on the function object itself; F has no such attribute.
    f.__click_params__ = [*reversed(global_params()), *params]  # type: ignore[attr-defined]
    return f


def command(group: click.Group, name: str, **kw: Any) -> Callable[[F], click.Command]:
    """``@group.command`` with the global options listed after the command's own."""

    def wrap(f: F) -> click.Command:
        made = group.command(name, **kw)(f)
        made.params.extend(global_params())
        return made

    return wrap


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on uvloop when it is installed, else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        import asyncio  # here, not at the top: most commands never start a loop

        return asyncio.run(coro)
    return uvloop.run(coro)


# -- argument helpers --------------------------------------------------------------------------


def read_text(source: str, what: str) -> str:
    """The text of FILE, or of stdin for ``-``."""
    if source == "-":
        return sys.stdin.read()
    try:
        with open(source, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {what} {source!r}: {exc.strerror}") from None


def text_or_file(text: str | None, source: str | None, what: str, *, required: bool = True) -> str | None:
    """A text given inline or as ``--file FILE|-``, not both."""
    if text is not None and source is not None:
        raise click.UsageError(f"give the {what} inline or with --file, not both")
    if source is not None:
        return read_text(source, what)
    if text is None and required:
        raise click.UsageError(f"the {what} is missing: give it inline, or with --file FILE (- for stdin)")
    return text


def json_object(value: str | None, what: str) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        parsed = jsonlib.loads(value, parse_constant=_not_json)
    except ValueError as exc:
        raise click.BadParameter(f"{what} must be a JSON object: {exc}") from None
    except RecursionError:
        raise click.BadParameter(f"{what} is nested too deeply to send") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter(f"{what} must be a JSON object, not {type(parsed).__name__}")
    return parsed


def _not_json(word: str) -> Any:
    """``NaN``, ``Infinity``: Python's json reads them, JSON (RFC 8259) has no such numbers."""
    raise ValueError(f"{word} is not a JSON number")


def actor_ref(value: str | None, what: str) -> tuple[str, str] | None:
    """``KIND:ID`` or a bare ``ID`` (kind human) → (kind, id)."""
    if value is None:
        return None
    kind, sep, actor_id = value.partition(":")
    if not sep:
        kind, actor_id = "human", value
    if not kind or not actor_id:
        raise click.BadParameter(f"{what} must be ID or KIND:ID, got {value!r}")
    return kind, actor_id


def drop_none(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in mapping.items() if value is not None}


def fail(code: str, message: str, **kw: Any) -> TaskctlError:
    return TaskctlError(code, message, **kw)


if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    # click 8.4 made ParamType generic; older releases, which pyproject allows, cannot subscript it.
    _TaskRefBase = click.ParamType[str]
else:
    _TaskRefBase = click.ParamType


#: The start of a task uuid as the board writes them (lower-case hex, its first group whole): what
#: a "unique prefix" of one looks like once it reaches past the first dash.
_UUID_PREFIX: Final = re.compile(r"[0-9a-f]{8}(?:-[0-9a-f]{0,12})+")


class TaskRef(_TaskRefBase):
    """A task uuid or identifier; ``demo-7`` is read as ``DEMO-0007``."""

    name = "ref"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value).strip()
        if not text:
            self.fail("a task ref must not be empty", param, ctx)
        if _UUID_PREFIX.fullmatch(text):
            return text  # ``b3c343d6-3`` is the start of a uuid, not DEMO-0003's shorthand
        prefix, sep, number = text.rpartition("-")
        if sep and prefix and number.isdigit() and prefix.replace("-", "").isalnum() and len(number) < 4:
            return f"{prefix.replace('-', '').upper()}-{int(number):04d}"
        return text

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        """Identifiers of the running board's live tasks; silent (no candidates) when none answers."""
        from click.shell_completion import CompletionItem

        try:
            board = resolve_board(autostart=False)
            with BoardHttp(board, timeout=1.0) as http:
                page = http.call("GET", API + "/tasks", query={"limit": limits.PAGE_LIMIT_MAX})
        except Exception:  # noqa: BLE001 - completion must never break the shell: no board, no candidates
            return []
        wanted = incomplete.upper()
        return [
            CompletionItem(task["identifier"], help=task.get("title"))
            for task in page.get("items", [])
            if str(task.get("identifier", "")).startswith(wanted)
        ]


REF = TaskRef()
