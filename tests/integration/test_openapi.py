"""``GET /api/v1/openapi.json`` describes exactly the routes the board serves (SPEC §5)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from services.board.api import PREFIX
from tests.support.board import API, BoardClient, RunningBoard

HTTP_METHODS = {"get", "put", "post", "delete", "patch", "options", "head", "trace"}
PATH_PARAM = re.compile(r"{(\w+)}")


async def openapi(client: BoardClient) -> dict[str, Any]:
    reply = await client.get(f"{API}/openapi.json")
    assert reply.status == 200, reply.body
    return reply.body


def served(board: RunningBoard) -> set[tuple[str, str]]:
    """(METHOD, path template) of every aiohttp route under /api/v1; HEAD is aiohttp's echo of GET."""
    routes = set()
    for route in board.app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        if route.method != "HEAD" and (path == PREFIX or path.startswith(PREFIX + "/")):
            routes.add((route.method, path))
    return routes


def described(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


async def test_the_document_lists_exactly_the_served_routes(client: BoardClient, board: RunningBoard) -> None:
    routes = served(board)
    assert len(routes) > 40  # the whole API, not an empty router
    assert described(await openapi(client)) == routes


async def test_the_document_has_the_shape_of_openapi_3_1(client: BoardClient) -> None:
    document = await openapi(client)
    assert document["openapi"].startswith("3.1.")
    assert document["info"]["title"] and document["info"]["version"]
    schemes = document["components"]["securitySchemes"]
    assert {name for requirement in document["security"] for name in requirement} <= set(schemes)
    operation_ids = []
    for path, item in document["paths"].items():
        assert path.startswith(f"{PREFIX}/")
        for method, operation in item.items():
            assert method in HTTP_METHODS, (path, method)
            operation_ids.append(operation["operationId"])
            # Every path template parameter is declared as a required path parameter, and only those.
            declared = {p["name"] for p in operation["parameters"] if p["in"] == "path"}
            assert declared == set(PATH_PARAM.findall(path)), (method, path)
            assert all(p["required"] for p in operation["parameters"] if p["in"] == "path")
            assert operation["responses"], (method, path)
            assert all(re.fullmatch(r"[1-5]\d\d|default", status) for status in operation["responses"])
            body = operation.get("requestBody")
            if body is not None:
                assert body["content"], (method, path)
    assert len(operation_ids) == len(set(operation_ids)), "operationIds are unique"


def successes(operation: dict[str, Any]) -> set[str]:
    return {status for status in operation["responses"] if status.startswith("2")}


async def test_creating_routes_document_their_201(client: BoardClient) -> None:
    paths = (await openapi(client))["paths"]
    assert successes(paths[f"{PREFIX}/projects"]["post"]) == {"201"}
    assert successes(paths[f"{PREFIX}/tasks"]["post"]) == {"200", "201"}
    assert successes(paths[f"{PREFIX}/tasks/{{ref}}"]["get"]) == {"200"}


async def test_the_document_passes_an_openapi_validator(client: BoardClient) -> None:
    validator = pytest.importorskip("openapi_spec_validator", reason="install the test extras (openapi-spec-validator)")
    validator.validate(await openapi(client))
