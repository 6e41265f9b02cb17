"""The typed keys of the board's application and request state, all in one place.

This module imports only the types the keys carry, never the modules that read them: the api, the
routes and the stream registry take their keys from here, and ``app.py``, which assembles them all,
is imported by none of them.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from .auth import Credentials, Session
from .conditions.timer import ConditionsEngine
from .logreader import LogReader
from .settings import BoardSettings
from .store import Actor, WriterStore
from .stream_registry import StreamRegistry

SETTINGS: Final = web.AppKey("settings", BoardSettings)
STORE: Final = web.AppKey("store", WriterStore)
CREDENTIALS: Final = web.AppKey("credentials", Credentials)
#: The actor a request without actor headers writes as (``taskd serve --actor``); unset: none.
DEFAULT_ACTOR: Final = web.AppKey("default_actor", Actor)
#: The one reader of the activity log that feeds every live stream.
LOG_READER: Final = web.AppKey("log_reader", LogReader)
#: The open streams (admission, pings, shutdown).
STREAMS: Final = web.AppKey("streams", StreamRegistry)
#: Conditions: the command hook, the temporal timer and the signal lane (docs/conditions.md).
CONDITIONS: Final = web.AppKey("conditions", ConditionsEngine)
#: The session a cookie-authenticated request carried (None once a logout ended it).
# A union is not a class, so the type is given as the key's parameter rather than its argument.
SESSION: Final[web.RequestKey[Session | None]] = web.RequestKey("session")
