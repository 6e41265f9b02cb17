"""The board's aiohttp application: middlewares, route registration, lifecycle."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from http.cookies import SimpleCookie

import structlog
from aiohttp import hdrs, web
from aiohttp.typedefs import Handler

from shared.errors import TaskloomError

from . import api, auth, compaction, stream_registry, ui
from .api import Route
from .client_stream import TOKEN_ROTATED
from .conditions.timer import ConditionsEngine
from .keys import (
    CONDITIONS,
    CREDENTIALS,
    DEFAULT_ACTOR,
    LOG_READER,
    SESSION,
    SETTINGS,
    STORE,
    STREAMS,
)
from .queries import activities
from .routes import ALL_ROUTES
from .routes.meta import end_revoked_sessions
from .settings import (
    BoardSettings,  # re-exported: BoardSettings has long been imported from here
)
from .sqlite_store import SqliteStore
from .store import SharedSecrets, WriterStore

log = structlog.get_logger("taskd")


#: RFC 9110 §9.2.1: every method that is not safe may change state.
STATE_CHANGING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

PUBLIC_PATHS = frozenset({"/health", "/login"})


#: RFC 9110 §11.6.1: a 401 names the scheme that would succeed; the realm tells boards from other services.
WWW_AUTHENTICATE = 'Bearer realm="taskloom"'


def error_headers(error: TaskloomError) -> dict[str, str] | None:
    """The headers HTTP requires beside some error statuses (RFC 9110 §15.5.2, §15.5.6, §10.2.3)."""
    if error.status == 401:
        return {"WWW-Authenticate": WWW_AUTHENTICATE}
    if error.status == 405:
        return {"Allow": ", ".join(error.details.get("allowed", ()))}
    if error.status == 503:
        return {"Retry-After": str(error.details.get("retry_after", 1))}
    return None


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as the JSON error body of SPEC §5, with the headers its status requires."""
    try:
        return await handler(request)
    except TaskloomError as error:
        return api.error_response(error, headers=error_headers(error))
    except web.HTTPNotFound:
        return api.error_response(TaskloomError("NOT_FOUND", f"no route for {request.path}"))
    except web.HTTPMethodNotAllowed as exc:
        refusal = TaskloomError("METHOD_NOT_ALLOWED", f"{request.method} is not allowed on {request.path}",
                                details={"allowed": sorted(exc.allowed_methods)})
        return api.error_response(refusal, headers=error_headers(refusal))
    except web.HTTPRequestEntityTooLarge as exc:
        return api.error_response(TaskloomError("PAYLOAD_TOO_LARGE", str(exc.text)))
    except web.HTTPException:
        raise
    except Exception:
        log.exception("request_failed", method=request.method, path=request.path)
        return api.error_response(TaskloomError("INTERNAL", "internal error; see the board log"))


@web.middleware
async def guard_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The Host guard for every request, then the token or session cookie for all but public paths."""
    settings = request.app[SETTINGS]
    if not auth.host_allowed(request.headers.get("Host"), settings.allowed_hosts):
        raise TaskloomError(
            "FORBIDDEN_HOST",
            "this board answers only loopback host names",
            details={"host": request.headers.get("Host")},
            hint="add the name with taskd serve --allow-host NAME",
        )
    if request.path in PUBLIC_PATHS or request.path == "/" or request.path.startswith("/static/"):
        return await handler(request)
    credentials = request.app[CREDENTIALS]
    if await credentials.check_bearer_anywhere(request.headers.get("Authorization")):
        # A page on another origin cannot send this header without a CORS preflight the board
        # never grants, so a bearer request needs no Origin check.
        return await handler(request)
    session = credentials.check_session(request.cookies.get(credentials.cookie_name))
    if session is not None:
        if request.method in STATE_CHANGING_METHODS:
            check_same_origin(request)
        request[SESSION] = session
        return await handler(request)
    raise TaskloomError(
        "UNAUTHORIZED",
        "missing or wrong token",
        hint="send Authorization: Bearer <token from the board's token file>, or log in through a link from taskctl open",
    )


def check_same_origin(request: web.Request) -> None:
    """A cookie-authenticated write must come from the board's own page (CSRF, RFC 6454).

    ``SameSite=Strict`` does not stop it: a page on another port of 127.0.0.1 is the same *site*,
    so the browser sends it the cookie. The Origin a browser puts on every non-GET request (Fetch
    standard) names the page that made it; ``Sec-Fetch-Site`` says the same where Origin is
    missing. A write that carries neither is refused too: every browser that runs the page sends
    at least one of them.
    """
    own = f"{request.scheme}://{request.host}".lower()
    origin = request.headers.get("Origin")
    site = request.headers.get("Sec-Fetch-Site")
    if origin is not None and origin.strip().lower() != own:
        reason = "the request comes from another origin"
    elif site is not None and site.strip().lower() in ("cross-site", "same-site"):
        reason = f"the request comes from another origin (Sec-Fetch-Site: {site.strip().lower()})"
    elif origin is None and site is None:
        reason = "a cookie-authenticated change must carry its Origin"
    else:
        return
    raise TaskloomError(
        "FORBIDDEN_ORIGIN",
        f"{reason}; the board's session cookie only changes state from {own}",
        details={"origin": origin[:200] if origin else origin, "expected": own},
        hint="scripts and other programs authenticate with Authorization: Bearer <token>, not the browser cookie",
    )


async def renew_session(request: web.Request, response: web.StreamResponse) -> None:
    """The sliding lifetime: re-issue a cookie in use before its headers go out (streams too)."""
    session = request.get(SESSION)
    if session is None:
        return
    credentials = request.app[CREDENTIALS]
    cookie = credentials.renewal(session)
    if cookie is not None:
        set_session_cookie(response, credentials, cookie, credentials.check_session(cookie))


def set_session_cookie(
    response: web.StreamResponse, credentials: auth.Credentials, cookie: str, session: auth.Session | None
) -> None:
    """Add the ``Set-Cookie`` header itself: aiohttp folds ``set_cookie`` into the headers before
    ``on_response_prepare`` runs, so a cookie set from that hook would never be sent."""
    jar: SimpleCookie = SimpleCookie()
    jar[credentials.cookie_name] = cookie
    morsel = jar[credentials.cookie_name]
    morsel["max-age"] = credentials.max_age(session) if session is not None else 0
    morsel["path"] = "/"
    morsel["httponly"] = True
    morsel["samesite"] = "Strict"
    response.headers.add(hdrs.SET_COOKIE, morsel.OutputString())


async def health(request: web.Request) -> web.Response:
    return api.json_response({"ok": True})


async def login(request: web.Request) -> web.StreamResponse:
    """Trade a one-time code for the session cookie, then land on the board page."""
    code = request.query.get("code", "")
    credentials = request.app[CREDENTIALS]
    if not await credentials.redeem_anywhere(code):
        # The link opened twice in a browser that it already signed in: just show the board.
        if credentials.check_session(request.cookies.get(credentials.cookie_name)) is not None:
            raise web.HTTPFound("/")
        return ui.login_refused(challenge=WWW_AUTHENTICATE)
    response = web.HTTPFound("/")
    cookie = credentials.new_session()
    set_session_cookie(response, credentials, cookie, credentials.check_session(cookie))
    raise response


def register(app: web.Application, routes: list[Route]) -> None:
    for route in routes:
        handler = api.to_aiohttp(route, STORE)
        if route.method == "GET":
            # RFC 9110 §9.3.2: HEAD answers like GET without the body; add_route("GET") adds no HEAD.
            app.router.add_get(route.path, handler, allow_head=True)
        else:
            app.router.add_route(route.method, route.path, handler)


def open_store(settings: BoardSettings) -> WriterStore:
    """The engine the settings name: a PostgreSQL URL, else the SQLite file in the data directory."""
    if settings.database:
        from .postgres_store import PostgresStore  # psycopg is loaded only by a board that uses it

        return PostgresStore(settings.database)
    return SqliteStore(settings.database_path, synchronous=settings.durability)


async def share_credentials(app: web.Application) -> None:
    """On a database several board processes serve, the token is the database's, not the file's.

    The first process to start stores its token; every other one takes it (and writes it to its own
    token file, so a local ``taskctl`` finds it). A rotation on any process reaches the others.
    """
    store = app[STORE]
    if not isinstance(store, SharedSecrets):
        return
    credentials = app[CREDENTIALS]
    settings = app[SETTINGS]
    loop = asyncio.get_running_loop()
    credentials.shared = store

    async def reload_revocations() -> None:
        stored = await loop.run_in_executor(None, store.secrets_with_prefix, auth.REVOKED_PREFIX)
        credentials.merge_revocations({key.removeprefix(auth.REVOKED_PREFIX): int(until) for key, until in stored.items()})
        end_revoked_sessions(app)  # a logout on another process ends its streams here too

    token = await loop.run_in_executor(None, functools.partial(
        store.write_secret, auth.TOKEN_SECRET, credentials.token, only_if_absent=True))
    if token != credentials.token:
        await loop.run_in_executor(None, auth.write_token, settings.token_path, token)
        credentials.replace_token(token)

    await reload_revocations()

    async def take_stored_token() -> None:
        async with credentials.replacing:  # read under it: the last reader holds the newest token
            stored = await loop.run_in_executor(None, store.read_secret, auth.TOKEN_SECRET)
            if stored is None or stored == credentials.token:
                return
            await loop.run_in_executor(None, auth.write_token, settings.token_path, stored)
            credentials.replace_token(stored)
        closed = app[STREAMS].end_where(TOKEN_ROTATED)
        log.info("token_rotated_elsewhere", fingerprint=auth.token_fingerprint(stored), streams_closed=closed)

    credentials.take_stored_token = take_stored_token

    async def reload_token() -> None:
        await reload_revocations()
        await take_stored_token()

    pending: set[asyncio.Task[None]] = set()

    def reload_soon() -> None:
        task = asyncio.ensure_future(reload_token())
        pending.add(task)
        task.add_done_callback(pending.discard)

    store.add_token_listener(reload_soon)


def create_app(settings: BoardSettings, *, store: WriterStore | None = None) -> web.Application:
    """The board application; it owns (opens and closes) its store unless one is passed in."""
    app = web.Application(
        middlewares=[errors_middleware, guard_middleware],
        client_max_size=api.MAX_ATTACHMENT_BYTES + 1024,
    )
    app[SETTINGS] = settings
    if settings.default_actor is not None:
        app[DEFAULT_ACTOR] = settings.default_actor
    token = auth.load_or_create_token(settings.token_path)
    app[CREDENTIALS] = auth.Credentials(
        token,
        revoked_path=settings.revoked_sessions_path,
        idle_seconds=settings.session_idle_seconds,
        absolute_seconds=settings.session_absolute_seconds,
    )
    owned = store is None
    app[STORE] = store or open_store(settings)

    async def store_lifecycle(app: web.Application) -> AsyncIterator[None]:
        if owned:
            app[STORE].open()
        board_id = await app[STORE].query(lambda conn: activities.board_meta(conn)["board_id"])
        app[CREDENTIALS].bind_board(board_id)
        await share_credentials(app)
        yield
        if owned:
            app[STORE].close()

    app.cleanup_ctx.append(store_lifecycle)
    app.router.add_get("/health", health)
    app.router.add_get("/login", login)
    app.on_response_prepare.append(renew_session)
    register(app, ALL_ROUTES)
    app[LOG_READER], app[STREAMS] = stream_registry.setup(app, settings=settings, store=app[STORE])
    engine = app[CONDITIONS] = ConditionsEngine(
        app[STORE], claim_fresh_seconds=settings.claim_fresh_seconds, after_log=app[LOG_READER].after,
    )
    engine.add_signal_listener(app[STREAMS].broadcast_signal)

    async def conditions_lifecycle(app: web.Application) -> AsyncIterator[None]:
        # After the store opened; stops before it closes (cleanup runs in reverse order).
        await engine.start()
        yield
        await engine.stop()

    app.cleanup_ctx.append(conditions_lifecycle)
    ui.setup(app)
    compaction.setup(app, store_key=STORE, settings_key=SETTINGS)
    return app
