"""Route declarations, request validation and JSON responses for the HTTP API (SPEC §5).

Each route module declares ``ROUTES``: method, path, handler and the schema of its query and body.
The same declarations register the aiohttp handlers and generate ``/api/v1/openapi.json``, and
unknown query parameters or body fields are refused by name before a handler runs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from aiohttp import web

from shared import domain, limits
from shared.errors import TaskloomError, not_found, validation
from shared.events import SYSTEM
from shared.json_bounds import check_free_form, check_json

from .keys import DEFAULT_ACTOR, SETTINGS
from .settings import BoardSettings
from .store import Actor, WriterStore

MAX_BODY_BYTES = limits.MAX_BODY_BYTES
MAX_ATTACHMENT_BYTES = limits.MAX_ATTACHMENT_BYTES
PREFIX = "/api/v1"
#: SQLite integers are signed 64-bit; a larger number would fail deep in the driver as a 500.
INT_MIN = limits.INT64_MIN
INT_MAX = limits.INT64_MAX
#: ASCII digits only: ``str.isdigit`` also takes '²' and '١', which ``int()`` reads or refuses.
_INTEGER = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class F:
    """One field of a query or body schema."""

    type: str  # "str" | "int" | "bool" | "list" | "dict" | "any"
    required: bool = False
    nullable: bool = False
    enum: tuple[str, ...] | None = None
    items: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    description: str = ""


Schema = Mapping[str, F]

_PY_TYPES: dict[str, tuple[type[Any], ...]] = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "list": (list,),
    "dict": (dict,),
    "any": (object,),
}


def _integral(value: Any) -> Any:
    """``1.0`` as 1: JSON Schema's integer is any number with a zero fractional part (§6.1.1)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)  # beyond 64 bits it is refused by the range check, as an int would be
    return value


def _echo(value: Any) -> Any:
    """``value`` as an error's ``details`` may carry it: an integer past 64 bits (which a decoder
    that keeps integers exact hands over as an int) as its decimal text, since orjson cannot
    encode it and the answer would become a 500."""
    if isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value <= INT_MAX:
        return str(value)
    return value


def _refuse_nul(name: str, texts: list[Any]) -> None:
    """Refuse a value whose texts hold U+0000: a text field, or the items of a list (a body's, or a
    query's comma-separated one). U+0000 ends a text for SQLite's length() (its CHECKs would judge
    another text than the one stored) and for every C tool reading the file; PostgreSQL refuses it
    in any text, a filter's too, so each engine would answer it differently."""
    if any("\x00" in text for text in texts if isinstance(text, str)):
        raise validation(f"{name} must not contain U+0000 (NUL)", field=name)


def _check_value(name: str, spec: F, value: Any) -> Any:
    if value is None:
        if spec.nullable:
            return None
        raise validation(f"{name} must not be null", field=name)
    if spec.type == "int":
        value = _integral(value)
    expected = _PY_TYPES[spec.type]
    # bool is an int in Python; a JSON true is never a valid count.
    if not isinstance(value, expected) or (spec.type == "int" and isinstance(value, bool)):
        raise validation(f"{name} must be of type {spec.type}", field=name, value=_echo(value))
    _refuse_nul(name, [value] if spec.type == "str" else value if spec.items == "str" else [])
    if spec.enum is not None and value not in spec.enum:
        raise validation(f"{name} must be one of {', '.join(spec.enum)}", field=name, value=value)
    if spec.type == "int":
        if not INT_MIN <= value <= INT_MAX:
            raise validation(f"{name} is out of range (a signed 64-bit integer)", field=name, value=str(value))
        if spec.minimum is not None and value < spec.minimum:
            raise validation(f"{name} must be at least {spec.minimum}", field=name, value=value)
        if spec.maximum is not None and value > spec.maximum:
            raise validation(f"{name} must be at most {spec.maximum}", field=name, value=value)
    if spec.type == "list" and spec.items is not None:
        for item in value:
            if not isinstance(item, _PY_TYPES[spec.items]):
                raise validation(f"{name} must be a list of {spec.items}", field=name, value=value)
    return value


def check_body(payload: Any, schema: Schema) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise validation("the request body must be a JSON object", received=type(payload).__name__)
    unknown = sorted(set(payload) - set(schema))
    if unknown:
        raise validation(f"unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}", unknown=unknown)
    checked: dict[str, Any] = {}
    for name, spec in schema.items():
        if name not in payload:
            if spec.required:
                raise validation(f"{name} is required", field=name)
            continue
        _check_bounds(name, spec, payload[name])
        checked[name] = _check_value(name, spec, payload[name])
    return checked


def _check_bounds(name: str, spec: F, value: Any) -> None:
    """Depth, 64-bit numbers and (free-form objects) size, before anything is stored or echoed."""
    if spec.type in ("dict", "any"):
        check_free_form(value, field=name)
    elif isinstance(value, (dict, list)):
        check_json(value, field=name)


def _parse_query_value(name: str, spec: F, raw: str) -> Any:
    if spec.type == "int":
        if not _INTEGER.fullmatch(raw) or len(raw) > 20:
            raise validation(f"{name} must be an integer", field=name, value=raw[:40])
        return _check_value(name, spec, int(raw))
    if spec.type == "bool":
        if raw not in ("true", "false", "1", "0"):
            raise validation(f"{name} must be true or false", field=name, value=raw)
        return raw in ("true", "1")
    if spec.type == "list":
        items = [item for item in raw.split(",") if item]
        _refuse_nul(name, items)
        for item in items:
            if spec.enum is not None and item not in spec.enum:
                raise validation(f"{name} must name only {', '.join(spec.enum)}", field=name, value=item)
        return items
    return _check_value(name, spec, raw)


def check_query(query: Mapping[str, str], schema: Schema) -> dict[str, Any]:
    unknown = sorted(set(query) - set(schema))
    if unknown:
        raise validation(f"unknown query parameter{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}", unknown=unknown)
    getall = getattr(query, "getall", None)
    if getall is not None:
        # ?status=todo&status=done would silently mean "todo" only; lists are comma-separated.
        repeated = sorted(name for name in set(query) if len(getall(name)) > 1)
        if repeated:
            raise validation(
                f"query parameter given more than once: {', '.join(repeated)}; send one (lists are comma-separated)",
                repeated=repeated,
            )
    checked: dict[str, Any] = {}
    for name, spec in schema.items():
        if name in query:
            checked[name] = _parse_query_value(name, spec, query[name])
        elif spec.required:
            raise validation(f"{name} is required", field=name)
    return checked


LIST_QUERY: Schema = {
    "limit": F("int", minimum=1, maximum=limits.PAGE_LIMIT_MAX,
               description=f"page size, 1–{limits.PAGE_LIMIT_MAX} (default {limits.PAGE_LIMIT_DEFAULT})"),
    "cursor": F("str", description="opaque cursor from next_cursor"),
}


def json_response(payload: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        body=orjson.dumps(payload), status=status, content_type="application/json", headers=headers
    )


def error_response(error: TaskloomError, *, headers: Mapping[str, str] | None = None) -> web.Response:
    return json_response(error.body(), status=error.status, headers=headers)


@dataclass
class Created:
    """A handler result answered with 201."""

    payload: Any


@dataclass
class Call:
    """What a handler gets: the validated query and body, the path parameters, the store."""

    request: web.Request
    store: WriterStore
    query: dict[str, Any]
    body: dict[str, Any]
    path: Mapping[str, str]

    @property
    def actor(self) -> Actor:
        return resolve_actor(self.request)

    @property
    def settings(self) -> BoardSettings:
        return self.request.app[SETTINGS]


Handler = Callable[[Call], Awaitable[Any]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    summary: str
    query: Schema = field(default_factory=dict)
    body: Schema | None = None
    #: Raw bodies (attachments) skip JSON parsing; the handler reads the bytes itself.
    raw_body: bool = False
    max_body: int = MAX_BODY_BYTES
    auth: bool = True
    tag: str = "board"
    #: The success statuses it answers with (201 when it creates), for the OpenAPI document.
    success: tuple[int, ...] = (200,)


ACTOR_HEADER = "X-Taskloom-Actor"
ACTOR_KIND_HEADER = "X-Taskloom-Actor-Kind"


def resolve_actor(request: web.Request) -> Actor:
    """Headers, then the token's configured default actor, else 403 ACTOR_REQUIRED (SPEC §4.1)."""
    raw_id, raw_kind = request.headers.get(ACTOR_HEADER, ""), request.headers.get(ACTOR_KIND_HEADER, "")
    judge = _judged_actor if len(raw_id) + len(raw_kind) <= _JUDGED_MAX_CHARS else header_actor
    actor = judge(raw_id, raw_kind)
    if actor is not None:
        return actor
    default = request.app.get(DEFAULT_ACTOR)
    if default is not None:
        return default
    raise TaskloomError(
        "ACTOR_REQUIRED",
        f"every write names its actor: send {ACTOR_HEADER} (and {ACTOR_KIND_HEADER})",
        hint="taskctl fills these from --actor/--actor-kind or TASKLOOM_ACTOR/TASKLOOM_ACTOR_KIND",
    )


def header_actor(raw_id: str, raw_kind: str) -> Actor | None:
    """The actor the headers name, None when they name none, or the refusal of a bad one."""
    actor_id = raw_id.strip()
    kind = raw_kind.strip() or "human"
    if actor_id:
        if not (_is_utf8(actor_id) and _is_utf8(kind)):
            # aiohttp hands undecodable header bytes over as surrogates, which neither SQLite nor
            # the JSON encoder (nor this error's own body) can carry.
            raise validation(f"{ACTOR_HEADER} and {ACTOR_KIND_HEADER} must be UTF-8 text", field=ACTOR_HEADER)
        if len(actor_id) > limits.ACTOR_ID_MAX_CHARS or len(kind) > limits.ACTOR_KIND_MAX_CHARS:
            raise validation(
                f"actor id or kind is too long (at most {limits.ACTOR_ID_MAX_CHARS} and"
                f" {limits.ACTOR_KIND_MAX_CHARS} characters)",
                actor=actor_id[:64],
            )
        domain.check_actor_kind(kind, ACTOR_KIND_HEADER)
        if kind == SYSTEM:
            raise validation(
                f"{SYSTEM} is the board's own actor (rollups, label GC); a client writes as itself",
                field=ACTOR_KIND_HEADER,
                value=kind,
            )
        return Actor(kind, actor_id)
    return None


#: A client sends the same two headers on every request: they are judged once per pair, not per
#: request. Bounded in entries and in the length of what is kept, so endless or huge distinct
#: values only churn it; a refusal is raised each time, never cached.
_judged_actor = functools.lru_cache(maxsize=256)(header_actor)
_JUDGED_MAX_CHARS: Final = 2 * (limits.ACTOR_ID_MAX_CHARS + limits.ACTOR_KIND_MAX_CHARS)


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole body, refusing more than ``limit`` bytes whatever Content-Length claims.

    ``StreamReader.read(n)`` returns what is buffered, not ``n`` bytes, so chunks are collected
    until EOF. An oversize body is read up to the limit before the refusal rather than refused on
    its Content-Length alone: a refusal that leaves megabytes in flight makes aiohttp linger on
    the connection for its full lingering time (10 s) before it can close it.
    """
    content = request.content
    if content.is_eof():
        # The whole body is buffered already (a small one arrives with its head, or right after):
        # taken at once, without an iterator and a chunk list per request.
        data = content.read_nowait()
        if len(data) > limit:
            raise body_too_large(request, limit)
        return data
    chunks: list[bytes] = []
    size = 0
    async for chunk in content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise body_too_large(request, limit)
        chunks.append(chunk)
    return b"".join(chunks)


def body_too_large(request: web.Request, limit: int) -> TaskloomError:
    return TaskloomError(
        "PAYLOAD_TOO_LARGE",
        f"the request body exceeds {limit} bytes",
        details={"limit": limit, "content_length": request.content_length},
    )


def parse_json(data: bytes) -> Any:
    try:
        return orjson.loads(data) if data else {}
    except orjson.JSONDecodeError as exc:
        raise validation(f"the request body is not valid JSON: {exc}") from exc


def to_aiohttp(route: Route, store_key: web.AppKey[WriterStore]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    # Without a query string only a required parameter can be missing: most requests skip parsing.
    query_required = any(spec.required for spec in route.query.values())

    async def handle(request: web.Request) -> web.StreamResponse:
        query = check_query(request.query, route.query) if request.query_string or query_required else {}
        body: dict[str, Any] = {}
        if route.body is not None:
            body = check_body(parse_json(await read_body(request, route.max_body)), route.body)
        elif not route.raw_body and request.method in ("POST", "PUT", "PATCH"):
            # A route without a body schema takes none; anything sent is refused, not ignored.
            extra = await read_body(request, route.max_body)
            if extra.strip() not in (b"", b"{}"):
                check_body(parse_json(extra), {})
        for name, value in request.match_info.items():
            if "\x00" in value:
                # No name or id the board stores holds U+0000 (the API refuses it in every value,
                # PostgreSQL cannot store it): nothing by this name exists, on either engine.
                raise not_found(name, value)
        call = Call(request, request.app[store_key], query, body, request.match_info)
        result = await route.handler(call)
        if isinstance(result, web.StreamResponse):
            return result
        if isinstance(result, Created):
            return json_response(result.payload, status=201)
        return json_response(result)

    handle.__name__ = route.handler.__name__
    return handle
