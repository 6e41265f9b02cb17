"""Stable error codes and their HTTP statuses: the single table every surface reads (SPEC §5)."""

from __future__ import annotations

from typing import Any, Final

ERROR_STATUS: Final[dict[str, int]] = {
    "VALIDATION_FAILED": 400,
    "CURSOR_AHEAD": 400,
    "UNAUTHORIZED": 401,
    "ACTOR_REQUIRED": 403,
    "FORBIDDEN_HOST": 403,
    "FORBIDDEN_ORIGIN": 403,
    "NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "INVALID_TRANSITION": 409,
    "TERMINAL_STATE": 409,
    "VERSION_CONFLICT": 409,
    "CLAIM_LOST": 409,
    "EXECUTION_ACTIVE": 409,
    "NOT_ASSIGNEE": 409,
    "NOT_CLAIMABLE": 409,
    "DEPENDENCY_OPEN": 409,
    "CONFLICT": 409,
    "AMBIGUOUS_REF": 409,
    "RELATION_EXISTS": 409,
    "RELATION_CYCLE": 409,
    "RELATION_INVALID": 422,
    "RELATION_DEPTH": 422,
    "RELATION_FAN_IN": 422,
    "CURSOR_EXPIRED": 410,
    "REQUEST_TIMEOUT": 408,
    "PAYLOAD_TOO_LARGE": 413,
    "APPROVAL_REQUIRED": 422,
    "REPORT_REQUIRED": 422,
    "REPORT_INVALID": 422,
    # A forced write past open blockers without its reason: whether force needs one depends on
    # the blockers the card has now, a rule on the board's state like the other 422s.
    "REASON_REQUIRED": 422,
    "TOO_MANY_STREAMS": 503,
    "STORE_UNAVAILABLE": 503,
    "INTERNAL": 500,
    "BOARD_NOT_EMPTY": 409,
}


class TaskloomError(Exception):
    """A refusal with a stable code; the message is for people, ``details`` for programs."""

    def __init__(self, code: str, message: str, *, details: dict[str, Any] | None = None, hint: str | None = None):
        if code not in ERROR_STATUS:
            raise ValueError(f"undeclared error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}
        self.hint = hint

    @property
    def status(self) -> int:
        return ERROR_STATUS[self.code]

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "details": self.details, "hint": self.hint}}


def validation(message: str, **details: Any) -> TaskloomError:
    return TaskloomError("VALIDATION_FAILED", message, details=details)


def not_found(what: str, ref: str) -> TaskloomError:
    return TaskloomError("NOT_FOUND", f"{what} {ref!r} not found", details={what: ref})
