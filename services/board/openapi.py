"""OpenAPI 3.1 description generated from the route declarations, so it cannot drift from them.

The request schemas come from each route's ``F`` fields plus the rules the commands enforce
(``schemas.FIELD_RULES``, ``schemas.BODY_RULES``); the answers from ``schemas.RESPONSES``; the
error answers from ``shared.errors.ERROR_STATUS``, one schema per status naming its codes.
"""

from __future__ import annotations

import re
from typing import Any, Final

from shared.errors import ERROR_STATUS

from . import schemas
from .api import F, Route

_JSON_TYPES = {"str": "string", "int": "integer", "bool": "boolean", "list": "array", "dict": "object"}
_PATH_PARAM = re.compile(r"{(\w+)}")
SUCCESS_WORDS = {200: "OK", 201: "Created", 304: "Not Modified: the If-None-Match names this content"}
ERROR_WORDS: Final = {
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
    409: "Conflict", 410: "Gone", 413: "Content Too Large", 422: "Unprocessable Content",
    500: "Internal Server Error", 503: "Service Unavailable",
}
#: RFC 9110 §11.6.1 and §10.2.3: the headers the board sends with these statuses.
ERROR_HEADERS: Final[dict[int, dict[str, Any]]] = {
    401: {"WWW-Authenticate": {"required": True, "schema": {"type": "string", "pattern": "^Bearer "}}},
    503: {"Retry-After": {"required": True, "schema": {"type": "string", "pattern": "^[0-9]+$"}}},
}


def error_schema(codes: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["error"],
        "additionalProperties": False,
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message", "details", "hint"],
                "additionalProperties": False,
                "properties": {
                    "code": {"type": "string", "enum": codes},
                    "message": {"type": "string"},
                    "details": {"type": "object"},
                    "hint": {"type": ["string", "null"]},
                },
            }
        },
    }


#: Every error status, with the codes that answer with it (SPEC §5).
ERROR_CODES: Final[dict[int, list[str]]] = {
    status: sorted(code for code, code_status in ERROR_STATUS.items() if code_status == status)
    for status in sorted(set(ERROR_STATUS.values()))
}
# Kept for callers that want the generic shape.
ERROR_SCHEMA: Final = error_schema(sorted(ERROR_STATUS))


def error_statuses(route: Route) -> list[int]:
    """The error statuses an operation can answer with: any status a code of ERROR_STATUS has,
    less those that cannot arise there (a 401 on a public route, 413 without a body, 405 on a
    documented method)."""
    statuses = set(ERROR_CODES) - {405}
    if not route.auth:
        statuses.discard(401)
    if route.method in ("GET", "DELETE") and route.body is None and not route.raw_body:
        statuses.discard(413)
    return sorted(statuses)


def field_schema(spec: F) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    if spec.type != "any":
        json_type = _JSON_TYPES[spec.type]
        schema["type"] = [json_type, "null"] if spec.nullable else json_type
    if spec.enum is not None:
        schema["enum"] = [*spec.enum, None] if spec.nullable else list(spec.enum)
    if spec.items is not None:
        schema["items"] = {"type": _JSON_TYPES[spec.items]}
    if spec.minimum is not None:
        schema["minimum"] = spec.minimum
    if spec.maximum is not None:
        schema["maximum"] = spec.maximum
    if spec.type == "int":
        # Beyond 64 bits the board refuses the number (api.INT_MIN/INT_MAX).
        from .api import INT_MAX, INT_MIN

        schema.setdefault("minimum", INT_MIN)
        schema.setdefault("maximum", INT_MAX)
    if spec.description:
        schema["description"] = spec.description
    return schema


def _constrained(route: Route, where: str, name: str, spec: F) -> dict[str, Any]:
    schema = field_schema(spec)
    rules = schemas.FIELD_RULES.get((route.method, route.path, where, name), {})
    for key, value in rules.items():
        schema[key] = {**schema[key], **value} if isinstance(value, dict) and key in schema else value
    if spec.type == "str":
        _refuse_nul(schema)
    if spec.items == "str":
        _refuse_nul(schema["items"])
    return schema


def _refuse_nul(schema: dict[str, Any]) -> None:
    """api._check_value refuses U+0000 in every text; beside a pattern it goes into allOf."""
    if "pattern" in schema:
        schema.setdefault("allOf", []).append({"pattern": schemas.NO_NUL})
    else:
        schema["pattern"] = schemas.NO_NUL


def _query_parameter(route: Route, name: str, spec: F) -> dict[str, Any]:
    if spec.type == "list":
        # Comma-separated on the wire; empty items are ignored (api._parse_query_value).
        schema: dict[str, Any] = {"type": "string", "description": spec.description or "comma-separated list"}
        names = spec.enum or schemas.FIELD_RULES.get((route.method, route.path, "query", name), {}).get("enum")
        if names:
            choice = "|".join(re.escape(value) for value in sorted(names, key=len, reverse=True))
            schema["pattern"] = rf"^,*(?:(?:{choice})(?:,+|{schemas.END}))*{schemas.END}"
    else:
        schema = _constrained(route, "query", name, spec)
    return {"name": name, "in": "query", "required": spec.required, "schema": schema}


def responses(route: Route) -> dict[str, Any]:
    key = (route.method, route.path)
    answers: dict[str, Any] = {}
    for status in route.success:
        answer: dict[str, Any] = {"description": SUCCESS_WORDS.get(status, "OK")}
        if status == 304:
            pass  # RFC 9110 §15.4.5: a 304 has no content
        elif key in schemas.RAW_RESPONSES:
            answer["content"] = schemas.RAW_RESPONSES[key]
        elif key in schemas.RESPONSES:
            answer["content"] = {"application/json": {"schema": schemas.RESPONSES[key]}}
        answers[str(status)] = answer
    for status in error_statuses(route):
        answer = {
            "description": ERROR_WORDS.get(status, "Error"),
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/Error{status}"}}},
        }
        if status in ERROR_HEADERS:
            answer["headers"] = ERROR_HEADERS[status]
        answers[str(status)] = answer
    return answers


def operation_id(route: Route) -> str:
    return f"{route.method.lower()}_{route.handler.__module__.rsplit('.', 1)[-1]}_{route.handler.__name__}"


def links(routes: list[Route]) -> dict[tuple[str, str], dict[str, Any]]:
    """Links from each creating operation's answer to the operations its id addresses.

    A POST answering with a resource names it under its own path (``/tasks`` → ``/tasks/{ref}…``,
    ``/tasks/{ref}/relations`` → ``/tasks/{ref}/relations/{id}``); ``schemas.EXTRA_LINKS`` adds
    the few that leave the path. Clients and Schemathesis' stateful phase follow them.
    """
    by_key = {(route.method, route.path): route for route in routes}
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for source in routes:
        if source.method != "POST" or not {200, 201} & set(source.success):
            continue
        if "id" not in _response_properties(source):
            continue
        for target in routes:
            rest = target.path[len(source.path):]
            params = _PATH_PARAM.findall(rest)
            # Only targets the answer addresses completely: one new path parameter, its id.
            if not (target.path.startswith(source.path) and rest.startswith("/{") and len(params) == 1):
                continue
            own = _PATH_PARAM.findall(source.path)
            param = params[0]
            parameters = {name: f"$request.path.{name}" for name in own}
            parameters[param] = "$response.body#/id"
            found.setdefault((source.method, source.path), {})[operation_id(target)] = {
                "operationId": operation_id(target), "parameters": parameters,
            }
    for (source_key, target_key, parameters, body) in schemas.EXTRA_LINKS:
        target = by_key[target_key]
        link: dict[str, Any] = {"operationId": operation_id(target)}
        if parameters:
            link["parameters"] = parameters
        if body is not None:
            link["requestBody"] = body
        found.setdefault(source_key, {})[operation_id(target)] = link
    return found


def _response_properties(route: Route) -> dict[str, Any]:
    schema = schemas.RESPONSES.get((route.method, route.path), {})
    if "$ref" in schema:
        schema = schemas.COMPONENTS[schema["$ref"].rsplit("/", 1)[-1]]
    properties: dict[str, Any] = schema.get("properties", {})
    return properties


def operation(route: Route, *, route_links: dict[str, Any] | None = None) -> dict[str, Any]:
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PATH_PARAM.findall(route.path)
    ]
    parameters.extend(_query_parameter(route, name, spec) for name, spec in route.query.items())
    op: dict[str, Any] = {
        "summary": route.summary,
        "operationId": operation_id(route),
        "tags": [route.tag],
        "parameters": parameters,
        "responses": responses(route),
    }
    if route_links:
        for status in route.success:
            op["responses"][str(status)]["links"] = route_links
    if route.body is not None:
        body: dict[str, Any] = {
            "type": "object",
            # check_body refuses unknown fields by name.
            "additionalProperties": False,
            "required": [name for name, spec in route.body.items() if spec.required],
            "properties": {name: _constrained(route, "body", name, spec) for name, spec in route.body.items()},
            **schemas.BODY_RULES.get((route.method, route.path), {}),
        }
        op["requestBody"] = {
            # An empty body reads as {}: it is required whenever {} is not a valid body.
            "required": any(spec.required for spec in route.body.values()) or "anyOf" in body,
            "content": {"application/json": {"schema": body}},
        }
    elif route.raw_body:
        op["requestBody"] = {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    if not route.auth:
        op["security"] = []
    return op


def describe(routes: list[Route], *, version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    all_links = links(routes)
    for route in routes:
        operation_links = all_links.get((route.method, route.path))
        paths.setdefault(route.path, {})[route.method.lower()] = operation(route, route_links=operation_links)
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
            },
            "schemas": {
                **schemas.COMPONENTS,
                **{f"Error{status}": error_schema(codes) for status, codes in ERROR_CODES.items()},
            },
        },
        "security": [{"bearer": []}, {"session": []}],
        "paths": paths,
    }
