"""Board identity, the OpenAPI description, and the browser's login links and logout."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..api import PREFIX, Call, Route, json_response
from ..auth import LOGIN_CODE_TTL
from ..client_stream import SESSION_ENDED, Stream
from ..keys import CREDENTIALS, SESSION, STREAMS
from ..openapi import describe
from ..queries import activities

VERSION = "0.1.0"


def _meta(conn: Any) -> dict[str, Any]:
    meta = activities.board_meta(conn)
    return {
        "board_id": meta["board_id"],
        "revision": activities.head(conn),
        "floor": int(meta.get("floor", "0")),
        "version": VERSION,
    }


async def board_meta(call: Call) -> Any:
    return await call.store.query(_meta)


async def openapi(call: Call) -> Any:
    from . import ALL_ROUTES  # the package imports this module; read the table at call time

    return describe(ALL_ROUTES, version=VERSION)


async def login_link(call: Call) -> Any:
    code = await call.request.app[CREDENTIALS].mint_login_code()
    base = f"{call.request.scheme}://{call.request.host}"
    return {"url": f"{base}/login?code={code}", "expires_in_seconds": int(LOGIN_CODE_TTL)}


def end_revoked_sessions(app: web.Application) -> int:
    """End the open streams whose browser session is revoked now; how many ended. A stream is
    authenticated once, when it starts: without this, one opened with a session that was logged
    out (here, or on another board process of a shared database) would keep reading the board."""
    credentials = app[CREDENTIALS]

    def still_valid(stream: Stream) -> bool:
        opened_with = stream.request.get(SESSION)
        return opened_with is None or not credentials.is_revoked(opened_with.nonce)

    return app[STREAMS].end_where(SESSION_ENDED, keep=still_valid)


async def logout(call: Call) -> web.StreamResponse:
    """End the browser session the request carries, on the board and in the browser."""
    credentials = call.request.app[CREDENTIALS]
    session = credentials.check_session(call.request.cookies.get(credentials.cookie_name))
    if session is not None:
        await credentials.end_session(session)
        end_revoked_sessions(call.request.app)
    call.request[SESSION] = None  # no renewed cookie on this answer
    response = json_response({"logged_out": session is not None})
    response.del_cookie(credentials.cookie_name, path="/", httponly=True, samesite="Strict")
    return response


ROUTES = [
    Route("GET", f"{PREFIX}/meta", board_meta, "Board identity and head revision"),
    Route("GET", f"{PREFIX}/openapi.json", openapi, "This API as OpenAPI 3.1"),
    Route("POST", f"{PREFIX}/login-links", login_link, "A one-time browser login link", body={}),
    Route("POST", f"{PREFIX}/logout", logout,
          "End the browser session: its cookie is refused from now on and cleared", body={}),
]
