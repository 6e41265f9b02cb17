"""The refusals taskctl raises and the secrets its output must never show (SPEC §10).

The token is a secret: every text a :class:`TaskctlError` carries is passed through
:func:`redact`, and so is everything :mod:`taskctl.output` prints.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_TOKEN_PATTERN = re.compile(r"tl_[0-9a-fA-F]{16,}")
_SECRETS: set[str] = set()


class TaskctlError(Exception):
    """A refusal, from the board or from taskctl itself, with a stable code and maybe a hint."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
        hint: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(redact(message))
        self.code = code
        self.message = redact(message)
        self.details = dict(details or {})
        self.hint = redact(hint) if hint else None
        self.status = status

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details, "hint": self.hint}


def remember_secret(secret: str | None) -> None:
    """Register a value that must never appear in any output."""
    if secret:
        _SECRETS.add(secret)


def redact(text: str) -> str:
    """Hide every known secret and anything shaped like a board token."""
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, "[redacted]")
    return _TOKEN_PATTERN.sub("tl_[redacted]", text)


def quotable(text: str) -> str:
    """``text`` as an error message may quote it: a lone surrogate (bytes that were not UTF-8, or
    half of a UTF-16 pair) written as its escape, so the message encodes; at most 200 characters."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:200]


def redact_json(value: Any) -> Any:
    """``redact`` through a JSON value, every string of it (keys too): a structured answer hides
    what the same answer printed as text hides."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(key) if isinstance(key, str) else key: redact_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_json(item) for item in value]
    return value


def internal_error(exc: BaseException) -> TaskctlError:
    """A failure that is taskctl's own (a bug), said without a secret; the trace only on request."""
    return TaskctlError("INTERNAL", redact(f"taskctl failed: {type(exc).__name__}: {exc}"),
                        hint="run again with TASKLOOM_DEBUG=1 for the traceback")
