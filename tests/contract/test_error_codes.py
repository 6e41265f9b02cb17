"""Every error code raised anywhere is in the one table that gives it an HTTP status (SPEC §5)."""

from __future__ import annotations

from shared.errors import ERROR_STATUS

from .sourcescan import code_forwarders, parse_text, raised_codes, raised_codes_in

SCANNED = ("services", "shared", "taskctl")


def test_every_raised_code_is_declared() -> None:
    found = raised_codes(SCANNED)
    assert len(found) >= 20, "the scanner stopped seeing TaskloomError(...) calls"
    undeclared = [f"{path}:{line} {code}" for path, line, code in found if code not in ERROR_STATUS]
    assert undeclared == [], "add the code to shared.errors.ERROR_STATUS (with its status) or use a declared one"


def test_the_table_maps_codes_to_http_statuses() -> None:
    assert all(code.isupper() and code.replace("_", "").isalpha() for code in ERROR_STATUS)
    assert all(400 <= status <= 599 for status in ERROR_STATUS.values())


def test_the_scan_follows_helpers_that_forward_a_code() -> None:
    source = '''
def _refuse(code, message, **details):
    return TaskloomError(code, message, details=details)

def check():
    raise TaskloomError("NOT_A_CODE", "x")

def other():
    raise _refuse("ALSO_NOT_A_CODE", "y")

def fine():
    raise errors.TaskloomError(code="NOT_FOUND", message="z")
'''
    tree = parse_text(source)
    forwarders = code_forwarders(tree)
    assert forwarders == {"_refuse": 0}
    codes = {code for _, _, code in raised_codes_in(tree, "snippet.py", forwarders)}
    assert codes == {"NOT_A_CODE", "ALSO_NOT_A_CODE", "NOT_FOUND"}
