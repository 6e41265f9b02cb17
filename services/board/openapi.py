"""OpenAPI 3.1 description generated from the route declarations, so it cannot drift from them."""

from __future__ import annotations

import re
from typing import Any

from .api import F, Route

_JSON_TYPES = {"str": "string", "int": "integer", "bool": "boolean", "list": "array", "dict": "object"}
_PATH_PARAM = re.compile(r"{(\w+)}")
SUCCESS_WORDS = {200: "OK", 201: "Created"}

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "details": {"type": "object"},
                "hint": {"type": ["string", "null"]},
            },
        }
    },
}


def field_schema(spec: F) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    if spec.type != "any":
        json_type = _JSON_TYPES[spec.type]
        schema["type"] = [json_type, "null"] if spec.nullable else json_type
    if spec.enum is not None:
        schema["enum"] = list(spec.enum)
    if spec.items is not None:
        schema["items"] = {"type": _JSON_TYPES[spec.items]}
    if spec.minimum is not None:
        schema["minimum"] = spec.minimum
    if spec.maximum is not None:
        schema["maximum"] = spec.maximum
    if spec.description:
        schema["description"] = spec.description
    return schema


def operation(route: Route) -> dict[str, Any]:
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PATH_PARAM.findall(route.path)
    ]
    for name, spec in route.query.items():
        schema = field_schema(spec)
        if spec.type == "list":
            schema = {"type": "string", "description": spec.description or "comma-separated list"}
        parameters.append({"name": name, "in": "query", "required": spec.required, "schema": schema})
    op: dict[str, Any] = {
        "summary": route.summary,
        "operationId": f"{route.method.lower()}_{route.handler.__module__.rsplit('.', 1)[-1]}_{route.handler.__name__}",
        "tags": [route.tag],
        "parameters": parameters,
        "responses": {
            **{str(status): {"description": SUCCESS_WORDS.get(status, "OK")} for status in route.success},
            "default": {"description": "Error", "content": {"application/json": {"schema": ERROR_SCHEMA}}},
        },
    }
    if route.body is not None:
        op["requestBody"] = {
            "required": any(spec.required for spec in route.body.values()),
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": [name for name, spec in route.body.items() if spec.required],
                        "properties": {name: field_schema(spec) for name, spec in route.body.items()},
                    }
                }
            },
        }
    elif route.raw_body:
        op["requestBody"] = {"required": True, "content": {"application/octet-stream": {}}}
    if not route.auth:
        op["security"] = []
    return op


def describe(routes: list[Route], *, version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = operation(route)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Taskloom board API", "version": version},
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "session": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "taskloom_session_<board id>",
                    "description": "the browser session cookie, named per board; writes with it need the board's own Origin",
                },
            }
        },
        "security": [{"bearer": []}, {"session": []}],
        "paths": paths,
    }
