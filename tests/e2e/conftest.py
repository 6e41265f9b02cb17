"""What every Chromium test module shares: one headless browser per module (support_browser.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.support_browser import launch_browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launch_browser()
