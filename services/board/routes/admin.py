"""Routes for board administration (being built; see the open issue)."""

from __future__ import annotations

from ..api import Route

ROUTES: list[Route] = []
