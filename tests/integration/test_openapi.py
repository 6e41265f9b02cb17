"""``GET /api/v1/openapi.json`` describes exactly the routes the board serves (SPEC §5)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from services.board import backup, report_format, schemas
from services.board.api import INT_MAX, INT_MIN, PREFIX, check_query
from services.board.commands import attachments as attachment_commands
from services.board.commands import comments as comment_commands
from services.board.commands import projects as project_commands
from services.board.commands import tasks as task_commands
from services.board.commands.common import check_actor, check_reason, normalise_label, require_reason
from services.board.openapi import describe
from services.board.queries import tasks as task_queries
from services.board.routes import ALL_ROUTES
from shared import domain, limits
from shared.errors import ERROR_STATUS, TaskloomError
from shared.json_bounds import check_free_form
from tests.support import openapi_guard
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
    import openapi_spec_validator  # a test extra: make test installs it

    openapi_spec_validator.validate(await openapi(client))


# -- the answers and the constraints ------------------------------------------------------------


def test_every_operation_declares_its_success_body_and_its_errors() -> None:
    document = describe(ALL_ROUTES, version="test")
    for route in ALL_ROUTES:
        operation = document["paths"][route.path][route.method.lower()]
        for status in route.success:
            content = operation["responses"][str(status)].get("content")
            if status == 304:  # RFC 9110 §15.4.5: no content
                assert content is None, (route.method, route.path)
                continue
            assert content and all("schema" in media for media in content.values()), (route.method, route.path, status)
        declared_errors = {int(status) for status in operation["responses"] if status[0] in "45"}
        assert {400, 403, 404, 500, 503} <= declared_errors, (route.method, route.path)
        assert (401 in declared_errors) == route.auth
        # Each error status names exactly the codes that answer with it.
        for status in declared_errors:
            codes = document["components"]["schemas"][f"Error{status}"]["properties"]["error"]["properties"]["code"]["enum"]
            assert set(codes) == {code for code, code_status in ERROR_STATUS.items() if code_status == status}
    events = document["paths"][f"{PREFIX}/events"]["get"]["responses"]["200"]["content"]
    assert set(events) == {"text/event-stream"}


def test_every_rule_names_a_field_the_route_declares() -> None:
    fields = {
        (route.method, route.path, where, name)
        for route in ALL_ROUTES
        for where, schema in (("query", route.query), ("body", route.body or {}))
        for name in schema
    }
    assert set(schemas.FIELD_RULES) <= fields, set(schemas.FIELD_RULES) - fields
    keys = {(route.method, route.path) for route in ALL_ROUTES}
    assert set(schemas.BODY_RULES) <= keys
    assert set(schemas.RESPONSES) | set(schemas.RAW_RESPONSES) == keys, "one answer schema per route, no stale ones"


def test_bodies_refuse_unknown_fields_and_query_integers_are_64_bit() -> None:
    document = describe(ALL_ROUTES, version="test")
    for route in ALL_ROUTES:
        operation = document["paths"][route.path][route.method.lower()]
        if route.body is not None:
            assert operation["requestBody"]["content"]["application/json"]["schema"]["additionalProperties"] is False
        for parameter in operation["parameters"]:
            if parameter["schema"].get("type") == "integer":
                assert parameter["schema"]["minimum"] >= INT_MIN and parameter["schema"]["maximum"] <= INT_MAX


def test_the_answer_guard_refuses_what_the_document_does_not_say() -> None:
    url = "http://127.0.0.1:1"
    with pytest.raises(AssertionError, match="does not fit"):
        openapi_guard.check("GET", f"{url}{PREFIX}/tasks/DEMO-0001", 200, "application/json", {"id": "x"})
    with pytest.raises(AssertionError, match="does not declare"):
        openapi_guard.check("GET", f"{url}{PREFIX}/meta", 418, "application/json", {})
    with pytest.raises(AssertionError, match="does not fit"):
        openapi_guard.check("GET", f"{url}{PREFIX}/meta", 404, "application/json", {"error": {"code": "CONFLICT"}})
    assert openapi_guard.template_of(f"{PREFIX}/reports/template") == f"{PREFIX}/reports/template"
    assert openapi_guard.template_of(f"{PREFIX}/tasks/DEMO-1/acceptance/abc") == f"{PREFIX}/tasks/{{ref}}/acceptance/{{item}}"


# Each pattern of the document says yes exactly when the validator it describes does.

TRICKY = st.sampled_from(list("aZk0-._:/\\ \t\n\r\x0b\x1c\x85\xa0\u2028\u3000\u212a\u0130\x00\x1f\x7fé."))
TEXTS = st.one_of(st.text(TRICKY, max_size=24), st.text(max_size=24), st.text(TRICKY, min_size=60, max_size=70))


def accepts(check: Callable[[str], Any], text: str) -> bool:
    try:
        check(text)
    except TaskloomError:
        return False
    return True


def matches(pattern: str, text: str) -> bool:
    return re.search(pattern, text) is not None


@settings(max_examples=400)
@given(TEXTS)
def test_the_label_pattern_is_normalise_label(text: str) -> None:
    assert matches(schemas.LABEL_PATTERN, text) == accepts(normalise_label, text)


@settings(max_examples=300)
@given(st.one_of(TEXTS, st.text(TRICKY, min_size=495, max_size=505)))
def test_the_title_pattern_is_the_title_check(text: str) -> None:
    assert matches(schemas.TITLE["pattern"], text) == accepts(task_commands._title, text)


@settings(max_examples=300)
@given(TEXTS)
def test_the_reason_pattern_is_require_reason(text: str) -> None:
    assert matches(schemas.REASON["pattern"], text) == accepts(lambda value: require_reason(value, "x"), text)


@settings(max_examples=300)
@given(st.one_of(TEXTS, st.text(TRICKY, min_size=250, max_size=260)))
def test_the_filename_pattern_is_check_filename(text: str) -> None:
    assert matches(schemas.FILENAME_PATTERN, text) == accepts(attachment_commands.check_filename, text)


@settings(max_examples=300)
@given(st.one_of(TEXTS, st.sampled_from(["agent", " Agent\n", "TASKD", "tas\u212ad", "agents", "human", "", "  "])))
def test_the_actor_kind_pattern_is_check_actor_kind(text: str) -> None:
    def check(kind: str) -> None:
        if not kind.strip():
            raise TaskloomError("VALIDATION_FAILED", "blank")
        domain.check_actor_kind(kind, "kind")

    assert matches(schemas.ACTOR_KIND_PATTERN, text) == accepts(check, text)


@settings(max_examples=300)
@given(st.one_of(TEXTS, st.from_regex(r"[a-z0-9-]{1,34}\n?", fullmatch=True)))
def test_the_slug_pattern_is_the_project_id_check(text: str) -> None:
    assert matches(schemas.SLUG_PATTERN, text) == (project_commands._SLUG.fullmatch(text) is not None)


@settings(max_examples=300)
@given(st.lists(st.sampled_from([*domain.STATUSES, "", "todoo", "in", "done "]), max_size=4).map(",".join))
def test_a_list_query_pattern_is_its_parser(text: str) -> None:
    document = describe(ALL_ROUTES, version="test")
    status = next(p for p in document["paths"][f"{PREFIX}/tasks"]["get"]["parameters"] if p["name"] == "status")
    spec = next(route for route in ALL_ROUTES if route.path == f"{PREFIX}/tasks" and route.method == "GET").query["status"]
    assert matches(status["schema"]["pattern"], text) == accepts(lambda value: check_query({"status": value}, {"status": spec}), text)


# Every text cap of shared/limits.py is in the document, equal to the validator's own limit.

#: (METHOD, path, where, field) → the check the command runs on that text as sent.
TEXT_CHECKS: dict[tuple[str, str, str, str], Callable[[str], Any]] = {
    **{
        (method, path, "body", f"{role}_kind"): lambda value, role=role: check_actor(value, "ann", role)
        for method, path in (("POST", f"{PREFIX}/tasks"), ("PATCH", schemas.TASK))
        for role in ("assignee", "reporter")
    },
    **{
        (method, path, "body", f"{role}_id"): lambda value, role=role: check_actor("human", value, role)
        for method, path in (("POST", f"{PREFIX}/tasks"), ("PATCH", schemas.TASK))
        for role in ("assignee", "reporter")
    },
    ("POST", f"{schemas.TASK}/sessions", "body", "owner_kind"): lambda value: check_actor(value, "ann", "owner"),
    ("POST", f"{schemas.TASK}/sessions", "body", "owner_id"): lambda value: check_actor("human", value, "owner"),
    ("POST", f"{PREFIX}/tasks", "body", "description"): lambda value: task_commands._check_fields(description=value),
    ("PATCH", schemas.TASK, "body", "description"): lambda value: task_commands._check_fields(description=value),
    ("POST", f"{PREFIX}/tasks", "body", "idem"): lambda value: task_commands._check_fields(idem=value),
    **{
        ("POST", f"{schemas.TASK}/{action}", "body", "reason"): check_reason for action in ("claim", "move", "deliver")
    },
    **{
        key: lambda value: require_reason(value, "x")
        for key in (
            ("POST", f"{schemas.TASK}/reopen", "body", "reason"),
            ("POST", f"{schemas.TASK}/waive", "body", "reason"),
            ("POST", f"{schemas.TASK}/acceptance", "body", "reason"),
            ("DELETE", f"{schemas.TASK}/acceptance/{{item}}", "query", "reason"),
        )
    },
    ("POST", f"{schemas.TASK}/comments", "body", "body"): lambda value: comment_commands._check_body(value, "x"),
    ("POST", f"{schemas.TASK}/ask", "body", "body"): lambda value: comment_commands._check_body(value, "x"),
    ("POST", f"{PREFIX}/projects", "body", "readme"): lambda value: project_commands._check_free_fields(value, None, None),
    ("PUT", f"{PREFIX}/projects/{{id}}/readme", "body", "readme"): lambda value: project_commands._check_free_fields(value, None, None),
    ("POST", f"{PREFIX}/projects", "body", "workspace_path"): lambda value: project_commands._check_workspace("/" + value[1:]),
    ("PATCH", f"{PREFIX}/projects/{{id}}", "body", "workspace_path"): lambda value: project_commands._check_workspace("/" + value[1:]),
    ("POST", f"{PREFIX}/projects", "body", "name"): project_commands._check_name,
    ("PATCH", f"{PREFIX}/projects/{{id}}", "body", "name"): project_commands._check_name,
    ("POST", f"{PREFIX}/admin/backup", "body", "path"): backup.check_path_text,
    ("GET", f"{PREFIX}/tasks", "query", "q"): task_queries.search_words,
}
#: Texts bounded by their pattern (whose own tests are above), and texts that only name something
#: that must exist (a lookup answers 404 or an empty page, so no length can make them invalid).
PATTERN_BOUNDED = {"title", "phase", "filename", "label", "id"}
REPORT_BODIES = {("POST", f"{schemas.TASK}/{action}", "body", "body") for action in ("report", "deliver")}
LOOKUPS = {"cursor", "project", "assignee", "actor", "kind", "task", "target", "ref", "report_id", "for", "parent"}


def text_fields() -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """Every free-text field of the document (no enum), with its schema."""
    document = describe(ALL_ROUTES, version="test")
    found: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for route in ALL_ROUTES:
        operation = document["paths"][route.path][route.method.lower()]
        for name, spec in route.query.items():
            if spec.type == "str" and spec.enum is None:
                found[(route.method, route.path, "query", name)] = next(
                    p["schema"] for p in operation["parameters"] if p["name"] == name and p["in"] == "query"
                )
        for name, spec in (route.body or {}).items():
            if spec.type == "str" and spec.enum is None:
                body = operation["requestBody"]["content"]["application/json"]["schema"]
                found[(route.method, route.path, "body", name)] = body["properties"][name]
    return found


def test_every_free_text_is_capped_by_the_document_or_only_names_something() -> None:
    for key, schema in text_fields().items():
        name = key[3]
        if key in TEXT_CHECKS or key in REPORT_BODIES:
            assert "maxLength" in schema, key
        else:
            assert name in PATTERN_BOUNDED | LOOKUPS, f"{key}: a text without a documented cap"


@pytest.mark.parametrize("key", sorted(TEXT_CHECKS), ids=lambda key: f"{key[0]} {key[1]} {key[3]}")
def test_each_documented_cap_is_the_validators_limit(key: tuple[str, str, str, str]) -> None:
    check = TEXT_CHECKS[key]
    cap = text_fields()[key]["maxLength"]
    longest = "/" + "a" * (cap - 2) + "b"
    assert len(longest) == cap and accepts(check, longest), f"{key}: {cap} characters are refused"
    assert not accepts(check, longest + "c"), f"{key}: {cap + 1} characters are accepted"


def test_the_report_cap_is_the_report_checks() -> None:
    """Counted in UTF-8 bytes, so the character cap is the byte cap: more characters are more bytes."""
    for key in REPORT_BODIES:
        assert text_fields()[key]["maxLength"] == report_format.MAX_REPORT_BYTES
    assert any("bytes" in problem for problem in report_format.check_report("a" * (report_format.MAX_REPORT_BYTES + 1)))


# Free-form JSON: the document's schema says yes exactly when check_free_form does (below its
# byte limit, which JSON Schema cannot state).

BOUNDARY_NUMBERS = st.sampled_from([
    INT_MIN, INT_MIN + 1, INT_MAX, INT_MAX + 1, INT_MIN - 1, 2**64, 0, -1, 1.5, -2.5e-300,
    float(2**63), float(INT_MAX - 1023), -float(INT_MAX - 1023), 2.16e134, -1e19, 1e300, 6975204920642912741490688,
])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.text(max_size=4), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
    BOUNDARY_NUMBERS,
)


def nested(depth: int, leaf: Any) -> Any:
    for level in range(depth):
        leaf = [leaf] if level % 2 else {"k": leaf}
    return leaf


JSON_VALUES = st.one_of(
    st.recursive(
        SCALARS,
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)),
        max_leaves=8,
    ),
    st.builds(nested, st.integers(min_value=limits.MAX_JSON_DEPTH - 3, max_value=limits.MAX_JSON_DEPTH + 2), SCALARS),
)


def leaves(value: Any) -> list[Any]:
    """The scalars of a JSON value (floats compare equal to ints of the same value)."""
    if isinstance(value, dict):
        return [leaf for child in value.values() for leaf in leaves(child)]
    if isinstance(value, list):
        return [leaf for child in value for leaf in leaves(child)]
    return [value] if isinstance(value, float) else []


def free_form_validator(where: tuple[str, str, str]) -> Any:
    document = describe(ALL_ROUTES, version="test")
    method, path, name = where
    body = document["paths"][path][method.lower()]["requestBody"]["content"]["application/json"]["schema"]
    return jsonschema.Draft202012Validator({**body["properties"][name], "components": document["components"]})


FREE_FORM_FIELDS = [
    ("POST", f"{PREFIX}/tasks", "meta"), ("PATCH", schemas.TASK, "meta"),
    ("POST", f"{PREFIX}/projects", "meta"), ("POST", f"{PREFIX}/projects", "settings"),
    ("PATCH", f"{PREFIX}/projects/{{id}}", "meta"), ("PATCH", f"{PREFIX}/projects/{{id}}", "settings"),
]


def test_every_free_form_field_carries_the_bounds() -> None:
    for where in FREE_FORM_FIELDS:
        schema = free_form_validator(where).schema
        assert schema["type"] == "object" and schema["additionalProperties"] == schemas.ref(schemas.json_level(2)), where


@settings(max_examples=400)
@given(st.sampled_from(FREE_FORM_FIELDS), JSON_VALUES)
def test_the_free_form_schema_is_check_free_form(where: tuple[str, str, str], inner: Any) -> None:
    value = {"v": inner}
    # The one number JSON Schema cannot tell apart: -2^63 written as a float (see schemas.NUMBER_RANGE).
    assume(float(INT_MIN) not in leaves(value))
    documented = free_form_validator(where).is_valid(value)
    assert documented == accepts(lambda v: check_free_form(v, field=where[2]), value), value
