"""The board's HTTP/1.1 server: aiohttp's, minus its habit of echoing unparseable requests.

When aiohttp's parser refuses a request (bare-LF line endings, a control character in a header
value, an over-long line, a bad method or version, garbage in a chunk size), its
``RequestHandler.handle_error`` logs the exception through the ``aiohttp.server`` logger and
answers a text/plain 400 whose body is the exception message. That message quotes the raw
request line or header, ``Authorization: Bearer tl_…`` included, so the token reached stderr (the
journal under systemd) and the client. No middleware sees these requests (there is no request to
route), so the hook is one level down: a ``RequestHandler`` whose ``handle_error`` logs only the
exception's class and answers the JSON error body of SPEC §5 with a generic reason, and a filter
on the ``aiohttp.server`` logger that strips the quoted bytes from anything else it logs.
``connections.py`` builds the board's server from this handler (adding its read deadlines).

Any local process can send garbage without a token, as fast as it likes, so every line such a
client can cause goes through :class:`ThrottledWarning`: at most one per ``LOG_INTERVAL``, with
counts by kind, however many requests it sends (the board's log may be a file nothing rotates).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any, Final

import structlog
from aiohttp import http_exceptions, web
from aiohttp.web_protocol import RequestHandler, RequestPayloadError
from aiohttp.web_request import BaseRequest

from shared.errors import TaskloomError

from . import api

log = structlog.get_logger("taskd.http")

#: A line any client can cause at will is written at most once per this many seconds.
LOG_INTERVAL: Final = 5.0


class ThrottledWarning:
    """A warning any client can cause at will, written at most once per ``interval``.

    The first occurrence is written at once; those after it within the interval are counted by
    kind and written as one line when it ends. Every line carries ``count`` (occurrences since
    the last line) and ``kinds`` (the same, by kind) beside the latest occurrence's fields.
    """

    def __init__(self, event: str, *, logger: Any = None, interval: float = LOG_INTERVAL) -> None:
        self.event = event
        self.interval = interval
        self._log = log if logger is None else logger
        self._kinds: Counter[str] = Counter()
        self._fields: dict[str, Any] = {}
        self._written_at: float | None = None
        self._pending: asyncio.TimerHandle | None = None

    def note(self, kind: str, **fields: Any) -> None:
        """One occurrence (on the event loop)."""
        loop = asyncio.get_running_loop()
        self._kinds[kind] += 1
        self._fields = fields
        now = loop.time()
        if self._written_at is None or now - self._written_at >= self.interval:
            self._write(now)
        elif self._pending is None:
            self._pending = loop.call_at(self._written_at + self.interval, self._write_pending, loop)

    def close(self) -> None:
        """Write what is still counted (at shutdown); nothing is scheduled afterwards."""
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        if self._kinds:
            self._write(self._written_at or 0.0)

    def _write_pending(self, loop: asyncio.AbstractEventLoop) -> None:
        self._pending = None
        if self._kinds:
            self._write(loop.time())

    def _write(self, now: float) -> None:
        self._written_at = now
        kinds = dict(self._kinds)
        self._kinds.clear()
        self._log.warning(self.event, count=sum(kinds.values()), kinds=kinds, **self._fields)


class RequestWarnings:
    """The server's throttled lines about requests it refused before any route saw them."""

    def __init__(self, *, interval: float = LOG_INTERVAL) -> None:
        self.unparseable = ThrottledWarning("request_unparseable", interval=interval)
        self.timed_out = ThrottledWarning("request_timed_out", interval=interval)

    def close(self) -> None:
        self.unparseable.close()
        self.timed_out.close()

#: What the client is told about a request the parser refused: the class of the fault, never the
#: bytes (the parser's own message quotes the offending line). Most specific class first.
PARSER_REASONS: Final[tuple[tuple[type[BaseException], str], ...]] = (
    (http_exceptions.LineTooLong, "a request line or header line is too long"),
    (http_exceptions.BadHttpMethod, "the request method is malformed"),
    (http_exceptions.BadStatusLine, "the request line is malformed (RFC 9112 §3: METHOD SP target SP HTTP/1.x CRLF)"),
    (http_exceptions.InvalidHeader, "a header field is malformed"),
    (http_exceptions.InvalidURLError, "the request target is malformed"),
    (http_exceptions.TransferEncodingError, "the chunked body framing is malformed"),
    (http_exceptions.ContentLengthError, "the body is shorter than its Content-Length"),
    (http_exceptions.ContentEncodingError, "the body's Content-Encoding cannot be decoded"),
    (RequestPayloadError, "the body framing is malformed"),
    (http_exceptions.HttpProcessingError, "the request is not valid HTTP/1.1"),
)
GENERIC_REASON: Final = "the request is not valid HTTP/1.1"
HINT: Final = (
    "end every line with CRLF and keep control characters other than tab out of the request line "
    "and header values (RFC 9112 §2.2, RFC 9110 §5.5)"
)


def parser_reason(exc: BaseException | None) -> str:
    """A fixed sentence for the kind of fault, chosen by exception class alone."""
    for kind, reason in PARSER_REASONS:
        if isinstance(exc, kind):
            return reason
    return GENERIC_REASON


def is_parser_error(exc: BaseException | None) -> bool:
    return isinstance(exc, (http_exceptions.HttpProcessingError, RequestPayloadError))


#: aiohttp's parser refuses a request line or a header line of 8,190 bytes or more.
LONG_LINE_HINT: Final = (
    "keep the request line (method, path and query string) and each header line under 8 KiB; a long "
    "value belongs in a request body"
)


def malformed_request(exc: BaseException | None) -> TaskloomError:
    return TaskloomError(
        "VALIDATION_FAILED",
        "the request could not be parsed as HTTP/1.1 and was not read",
        details={"reason": parser_reason(exc)},
        # Line endings have nothing to do with a line that is only too long.
        hint=LONG_LINE_HINT if isinstance(exc, http_exceptions.LineTooLong) else HINT,
    )


class BoardRequestHandler(RequestHandler):
    """aiohttp's per-connection protocol with the board's answer to a request it cannot read."""

    __slots__ = ("_warnings",)

    def __init__(self, manager: web.Server, *, warnings: RequestWarnings, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._warnings = warnings

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # ``message`` and ``str(exc)`` quote the raw request: neither is logged nor sent.
        if request.writer.output_size > 0:
            raise ConnectionError("the response is under way; no error body can follow")
        if status == 400 or is_parser_error(exc):
            error_class = type(exc).__name__
            self._warnings.unparseable.note(error_class, remote=request.remote, error=error_class)
            error = malformed_request(exc)
        elif status == 504:
            self._warnings.timed_out.note("handler_timeout", remote=request.remote)
            error = TaskloomError("INTERNAL", "the request handler timed out")
        else:
            # A handler fault past every middleware: the board's own bug, so keep its traceback.
            log.error("request_failed", remote=request.remote, exc_info=exc)
            error = TaskloomError("INTERNAL", "internal error; see the board log")
        response = api.error_response(error)
        response.force_close()  # the parser's state is unknown after a refusal: do not reuse it
        return response


class RedactParserErrors(logging.Filter):
    """Drop the quoted request bytes from anything aiohttp's server logger would print.

    ``BoardRequestHandler`` no longer logs parser errors, but other aiohttp paths may log an
    exception whose message is a parser's (a payload error surfacing in a handler, a future
    version's new log line): those keep one line naming the exception class and lose the rest.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if is_parser_error(exc) or is_parser_error(exc.__cause__ if exc is not None else None):
            record.msg = "unparseable request refused (%s)"
            record.args = (type(exc).__name__,)
            record.exc_info = None
            record.exc_text = None
        return True


_REDACTION = RedactParserErrors()


def redact_aiohttp_server_log() -> None:
    """Install the filter on ``aiohttp.server`` once (idempotent: ``addFilter`` ignores repeats)."""
    logging.getLogger("aiohttp.server").addFilter(_REDACTION)
