"""Pytest hooks that turn every skip (and xfail) into a failure: a green run ran every test.

A test that cannot run here (a missing program, a missing platform feature) must fail with the
command that fixes it, never pass quietly; ``scripts/ensure-system-deps`` installs what the
suite runs. ``tests/conftest.py`` imports these hooks.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

NO_SKIPS: str = "this suite does not skip: a test that cannot run fails (see scripts/ensure-system-deps)"


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    wasxfail = getattr(report, "wasxfail", None)
    if wasxfail is not None:
        return f"marked xfail ({wasxfail or 'no reason'}): {longrepr}"
    return str(longrepr)


def _fail(report: pytest.TestReport | pytest.CollectReport) -> None:
    if report.skipped or hasattr(report, "wasxfail"):  # skipped, xfailed, or xpassed
        report.longrepr = f"{NO_SKIPS}\n{_reason(report)}"
        report.outcome = "failed"
        if hasattr(report, "wasxfail"):
            del report.wasxfail


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _fail(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _fail(report)
    return report
