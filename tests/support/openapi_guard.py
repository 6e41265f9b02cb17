"""Check real answers against ``/api/v1/openapi.json``: the status is declared, the body fits.

``tests/integration/conftest.py`` runs every integration test's replies through ``check``, so a
field the board starts returning, a status it starts answering with or a constraint the
document forgets fails the suite where it first shows, not in a client.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache
from typing import Any
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator

from services.board.openapi import describe
from services.board.routes import ALL_ROUTES

_PARAM = re.compile(r"{\w+}")


@lru_cache(maxsize=1)
def document() -> dict[str, Any]:
    return describe(ALL_ROUTES, version="test")


@lru_cache(maxsize=1)
def _templates() -> list[tuple[re.Pattern[str], str]]:
    """Path templates as regexes, literal ones first (``/reports/template`` before ``/{ref}``)."""
    paths = sorted(document()["paths"], key=lambda path: (path.count("{"), -len(path)))
    return [(re.compile("^" + _PARAM.sub("[^/]+", re.escape(path).replace(r"\{", "{").replace(r"\}", "}")) + "$"), path)
            for path in paths]


def template_of(path: str) -> str | None:
    for pattern, template in _templates():
        if pattern.match(path):
            return template
    return None


@cache
def _validator(template: str, method: str, status: str) -> Draft202012Validator | None:
    operation = document()["paths"][template][method]
    answer = operation["responses"].get(status)
    if answer is None:
        raise AssertionError(f"{method.upper()} {template} answered {status}, which the OpenAPI document does not declare")
    schema = answer.get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        return None
    # The schemas' $refs point into the document: validate with the components beside them.
    return Draft202012Validator({**schema, "components": document()["components"]})


def check(method: str, url: str, status: int, content_type: str | None, body: Any) -> None:
    """Raise AssertionError when an /api/v1 answer is undeclared or does not fit its schema."""
    path = urlsplit(url).path
    template = template_of(path)
    if template is None or method.lower() not in document()["paths"][template]:
        return  # not an API operation (the page, /health, /login) or a 405 for an undeclared method
    if status == 405:
        return  # an undeclared method on a declared path
    validator = _validator(template, method.lower(), str(status))
    if validator is None or not (content_type or "").startswith("application/json"):
        return
    errors = sorted(validator.iter_errors(body), key=lambda error: list(error.absolute_path))
    if errors:
        first = errors[0]
        raise AssertionError(
            f"{method} {path} → {status}: the body does not fit the OpenAPI document at "
            f"{'/'.join(map(str, first.absolute_path)) or '(root)'}: {first.message}"
        )
