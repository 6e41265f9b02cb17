"""HTTP routes, one module per resource. Each module declares ``ROUTES``."""

from __future__ import annotations

from ..api import Route
from . import (
    acceptance,
    activities,
    admin,
    attachments,
    breaches,
    comments,
    events,
    export,
    history,
    labels,
    meta,
    projects,
    relations,
    reports,
    sessions,
    state,
    tasks,
)

ALL_ROUTES: list[Route] = [
    *meta.ROUTES,
    *admin.ROUTES,
    *projects.ROUTES,
    *tasks.ROUTES,
    *comments.ROUTES,
    *reports.ROUTES,
    *acceptance.ROUTES,
    *relations.ROUTES,
    *labels.ROUTES,
    *sessions.ROUTES,
    *attachments.ROUTES,
    *activities.ROUTES,
    *export.ROUTES,
    *events.ROUTES,
    *state.ROUTES,
    *history.ROUTES,
    *breaches.ROUTES,
]
