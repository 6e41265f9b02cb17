"""JSON Schemas of the API's answers and of the rules the commands enforce beyond a field's type.

``openapi.py`` puts them into ``/api/v1/openapi.json``. Every bound is read from the constant the
validator itself uses, so the document cannot promise more or less than the board checks.

Patterns follow what the validators do with Python's ``str``: ``\\s`` is exactly the set that
``str.strip`` removes, and an anchor at the very end is written ``(?![\\s\\S])`` because ``$``
also matches before a final newline in Python (and not in ECMA-262): that form means "end of
text" in both dialects.
"""

from __future__ import annotations

from typing import Any, Final

from shared import domain, limits
from shared.conditions import CONDITION_SET
from shared.events import EVENT_SET, WIRE_NOISE

from .api import PREFIX
from .commands import acceptance, attachments, common, projects, sessions

#: End of the text in both Python's and ECMA-262's regular expressions.
END: Final = r"(?![\s\S])"
#: No U+0000 anywhere (api._check_value).
NO_NUL: Final = r"^[^\x00]*$"
#: A text with at least one character that is not white space (the commands' ``.strip()`` test).
NON_BLANK: Final = r"\S"


def stripped_length(maximum: int) -> str:
    """1 to ``maximum`` characters once the surrounding white space is stripped."""
    return rf"^\s*\S(?:[\s\S]{{0,{maximum - 2}}}\S)?\s*{END}"


def at_least(minimum: int) -> str:
    """At least ``minimum`` characters once stripped (``common.require_reason``)."""
    return rf"\S[\s\S]{{{minimum - 2},}}\S"


def _letters(word: str) -> str:
    """``word`` case-insensitively as ``str.lower`` folds it (the Kelvin sign lowers to 'k')."""
    folded = {"k": "Kk\u212a"}
    return "".join(f"[{folded.get(c, c.upper() + c)}]" for c in word)


#: An actor kind the board accepts: not blank, and not a role word (``domain.check_actor_kind``).
ACTOR_KIND_PATTERN: Final = (
    rf"^(?!\s*(?:{'|'.join(_letters(word) for word in sorted(domain.ROLE_WORDS))})\s*{END})[\s\S]*\S"
)
SLUG_PATTERN: Final = f"^{projects.SLUG_BODY}{END}"


def _label_pattern() -> str:
    """A label as sent: ``common.normalise_label`` strips it, lowers it and turns runs of white
    space into one '-'; the result must match its pattern in at most ``LABEL_MAX_CHARS``."""
    first, rest = r"a-z0-9", r"a-z0-9._:/\-"
    # str.lower maps exactly one non-ASCII character into a-z: U+212A KELVIN SIGN → 'k'.
    head, tail = f"[{first}A-Z\u212a]", f"[{rest}A-Z\u212a]"
    return rf"^\s*{head}(?:{tail}|\s+(?={tail})){{0,{common.LABEL_MAX_CHARS - 1}}}\s*{END}"


LABEL_PATTERN: Final = _label_pattern()
#: ``attachments.check_filename``: a plain name, no directory part, '..' or control character.
FILENAME_PATTERN: Final = (
    rf"^(?!\s*{END})(?!\.{END})(?![\s\S]*\.\.)[^/\\\x00-\x1f\x7f]{{1,{attachments.FILENAME_MAX_CHARS}}}{END}"
)
ABSOLUTE_PATH: Final = "^/"

# -- free-form JSON (task meta, project meta and settings): shared/json_bounds.check_free_form ----

#: Every number a client sends fits a signed 64-bit integer (orjson reads a longer integer literal
#: as a float, which SQLite would store rounded). The board refuses a float of magnitude 2^63 or
#: more, so the single float -2^63.0 is refused although it equals ``minimum``: JSON Schema's
#: numbers have no "written as a float".
NUMBER_RANGE: Final = {"minimum": limits.INT64_MIN, "maximum": limits.INT64_MAX}
#: The JSON types, with the number range on ``number`` (and so on ``integer``).
_JSON_TYPES: Final = ["null", "boolean", "string", "number", "object", "array"]


def json_level(level: int) -> str:
    """The component name of a JSON value nested at ``level`` (the field itself is level 1)."""
    return f"JsonLevel{level:02d}"


def _json_levels() -> dict[str, dict[str, Any]]:
    """One component per nesting level, each pointing at the next, so the depth limit is exact:
    a container is allowed down to ``MAX_JSON_DEPTH``, and below it only scalars. A recursive
    ``$ref`` could not say where the nesting stops; one shared ``$ref`` per level keeps the
    document linear in the depth."""
    levels: dict[str, dict[str, Any]] = {
        json_level(limits.MAX_JSON_DEPTH + 1): {"type": ["null", "boolean", "string", "number"], **NUMBER_RANGE},
    }
    for level in range(limits.MAX_JSON_DEPTH, 1, -1):
        inner = ref(json_level(level + 1))
        levels[json_level(level)] = {"type": _JSON_TYPES, **NUMBER_RANGE, "additionalProperties": inner, "items": inner}
    return levels


#: A free-form object field; its encoded size is checked too, which JSON Schema cannot state.
FREE_FORM: Final = {
    "additionalProperties": {"$ref": f"#/components/schemas/{json_level(2)}"},
    "description": (
        f"free-form JSON object: at most {limits.MAX_JSON_DEPTH} levels of arrays and objects, every number"
        f" a signed 64-bit integer's range, at most {limits.MAX_JSON_FIELD_BYTES} bytes as JSON"
    ),
}

# -- request constraints, by (METHOD, path, where, name) ----------------------------------------

TASK = f"{PREFIX}/tasks/{{ref}}"
#: common.check_reason counts the text as sent; require_reason then wants enough once stripped.
REASON: Final = {"pattern": at_least(domain.MIN_REASON_CHARS), "maxLength": limits.REASON_MAX_CHARS}
OPTIONAL_REASON: Final = {"maxLength": limits.REASON_MAX_CHARS}
TITLE: Final = {"pattern": stripped_length(domain.TITLE_MAX_CHARS)}
#: common.check_actor: the text as sent, before the role-word and blank checks.
ACTOR_KIND: Final = {"pattern": ACTOR_KIND_PATTERN, "maxLength": limits.ACTOR_KIND_MAX_CHARS}
ACTOR_ID: Final = {"pattern": NON_BLANK, "maxLength": limits.ACTOR_ID_MAX_CHARS}
LABELS: Final = {"items": {"type": "string", "pattern": LABEL_PATTERN}}
DESCRIPTION: Final = {"maxLength": limits.DESCRIPTION_MAX_CHARS}
README: Final = {"maxLength": limits.README_MAX_CHARS}
#: _check_workspace counts UTF-8 bytes: more characters than that are more bytes too.
WORKSPACE_PATH: Final = {"pattern": ABSOLUTE_PATH, "maxLength": limits.WORKSPACE_PATH_MAX_BYTES}
BACKUP_PATH: Final = {"pattern": ABSOLUTE_PATH, "maxLength": limits.PATH_MAX_CHARS}
COMMENT: Final = {"pattern": NON_BLANK, "maxLength": limits.COMMENT_MAX_CHARS}
#: report_format counts UTF-8 bytes; a text of more characters than that is more bytes too
#: (the refusal of a shorter text with many multi-byte characters is a 422, not a schema rule).
REPORT_BODY: Final = {"maxLength": limits.REPORT_MAX_BYTES}

FIELD_RULES: Final[dict[tuple[str, str, str, str], dict[str, Any]]] = {
    ("POST", f"{PREFIX}/projects", "body", "id"): {"pattern": SLUG_PATTERN},
    ("POST", f"{PREFIX}/projects", "body", "name"): {"maxLength": domain.PROJECT_NAME_MAX_CHARS},
    ("POST", f"{PREFIX}/projects", "body", "workspace_path"): WORKSPACE_PATH,
    ("POST", f"{PREFIX}/admin/backup", "body", "path"): BACKUP_PATH,
    ("POST", f"{PREFIX}/projects", "body", "readme"): README,
    ("POST", f"{PREFIX}/projects", "body", "meta"): FREE_FORM,
    ("POST", f"{PREFIX}/projects", "body", "settings"): FREE_FORM,
    ("PATCH", f"{PREFIX}/projects/{{id}}", "body", "name"): {"minLength": 1, "maxLength": domain.PROJECT_NAME_MAX_CHARS},
    ("PATCH", f"{PREFIX}/projects/{{id}}", "body", "workspace_path"): WORKSPACE_PATH,
    ("PATCH", f"{PREFIX}/projects/{{id}}", "body", "meta"): FREE_FORM,
    ("PATCH", f"{PREFIX}/projects/{{id}}", "body", "settings"): FREE_FORM,
    ("PUT", f"{PREFIX}/projects/{{id}}/readme", "body", "readme"): README,
    ("GET", f"{PREFIX}/tasks", "query", "label"): {"pattern": LABEL_PATTERN},
    ("GET", f"{PREFIX}/tasks", "query", "q"): {"pattern": NON_BLANK, "maxLength": limits.SEARCH_MAX_CHARS},
    ("POST", f"{PREFIX}/tasks", "body", "title"): TITLE,
    ("POST", f"{PREFIX}/tasks", "body", "description"): DESCRIPTION,
    ("POST", f"{PREFIX}/tasks", "body", "labels"): LABELS,
    ("POST", f"{PREFIX}/tasks", "body", "assignee_kind"): ACTOR_KIND,
    ("POST", f"{PREFIX}/tasks", "body", "reporter_kind"): ACTOR_KIND,
    ("POST", f"{PREFIX}/tasks", "body", "assignee_id"): ACTOR_ID,
    ("POST", f"{PREFIX}/tasks", "body", "reporter_id"): ACTOR_ID,
    ("POST", f"{PREFIX}/tasks", "body", "meta"): FREE_FORM,
    ("POST", f"{PREFIX}/tasks", "body", "idem"): {"maxLength": limits.IDEM_MAX_CHARS},
    ("PATCH", TASK, "body", "title"): TITLE,
    ("PATCH", TASK, "body", "description"): DESCRIPTION,
    ("PATCH", TASK, "body", "labels"): LABELS,
    ("PATCH", TASK, "body", "assignee_kind"): ACTOR_KIND,
    ("PATCH", TASK, "body", "reporter_kind"): ACTOR_KIND,
    ("PATCH", TASK, "body", "assignee_id"): ACTOR_ID,
    ("PATCH", TASK, "body", "reporter_id"): ACTOR_ID,
    ("PATCH", TASK, "body", "meta"): FREE_FORM,
    ("POST", f"{TASK}/claim", "body", "reason"): OPTIONAL_REASON,
    ("POST", f"{TASK}/move", "body", "reason"): OPTIONAL_REASON,
    ("POST", f"{TASK}/deliver", "body", "reason"): OPTIONAL_REASON,
    ("POST", f"{TASK}/reopen", "body", "reason"): REASON,
    ("POST", f"{TASK}/waive", "body", "reason"): REASON,
    ("POST", f"{TASK}/acceptance", "body", "reason"): REASON,
    ("POST", f"{TASK}/acceptance", "body", "items"): {
        "items": {"type": "string", "pattern": stripped_length(acceptance.ITEM_MAX_CHARS)},
        "uniqueItems": True,
    },
    ("DELETE", f"{TASK}/acceptance/{{item}}", "query", "reason"): REASON,
    ("POST", f"{TASK}/comments", "body", "body"): COMMENT,
    ("POST", f"{TASK}/ask", "body", "body"): COMMENT,
    ("POST", f"{TASK}/report", "body", "body"): REPORT_BODY,
    ("POST", f"{TASK}/deliver", "body", "body"): REPORT_BODY,
    ("POST", f"{TASK}/sessions", "body", "phase"): {"pattern": stripped_length(sessions.PHASE_MAX_CHARS)},
    ("POST", f"{TASK}/sessions", "body", "owner_kind"): ACTOR_KIND,
    ("POST", f"{TASK}/sessions", "body", "owner_id"): ACTOR_ID,
    ("POST", f"{TASK}/attachments", "query", "filename"): {"pattern": FILENAME_PATTERN},
    ("PUT", f"{PREFIX}/attachments/{{id}}", "query", "filename"): {"pattern": FILENAME_PATTERN},
    ("POST", f"{PREFIX}/export", "body", "ref"): {"pattern": NON_BLANK},
    # routes/events.event_filter: the streamed vocabulary, never wire noise.
    ("GET", f"{PREFIX}/events", "query", "event"): {"enum": sorted(EVENT_SET - WIRE_NOISE)},
}


def _paired(first: str, second: str) -> dict[str, Any]:
    """Both or neither, null counting as absent (``tasks._pair``)."""
    def given(name: str) -> dict[str, Any]:
        return {"required": [name], "properties": {name: {"type": "string"}}}

    return {"allOf": [{"if": given(first), "then": given(second)}, {"if": given(second), "then": given(first)}]}


#: Rules that tie body fields together, by (METHOD, path).
BODY_RULES: Final[dict[tuple[str, str], dict[str, Any]]] = {
    # compaction.plan: exactly one of the two ways to name what goes.
    ("POST", f"{PREFIX}/admin/compact"): {"oneOf": [
        {"required": ["through"], "not": {"required": ["older_than_days"]}},
        {"required": ["older_than_days"], "not": {"required": ["through"]}},
    ]},
    ("POST", f"{PREFIX}/tasks"): {"allOf": [_paired("assignee_kind", "assignee_id"), _paired("reporter_kind", "reporter_id")]},
    ("POST", f"{TASK}/acceptance"): {
        # acceptance.change_acceptance: something to change, and a reason only with a mode.
        "anyOf": [{"required": ["mode"]}, {"required": ["items"], "properties": {"items": {"minItems": 1}}}],
        "dependentRequired": {"reason": ["mode"]},
    },
    ("PATCH", TASK): {
        # routes/tasks.patch: a pair is sent whole, so the answer never depends on what the task holds.
        "allOf": [_paired("assignee_kind", "assignee_id"), _paired("reporter_kind", "reporter_id")],
        "dependentRequired": {
            "assignee_kind": ["assignee_id"], "assignee_id": ["assignee_kind"],
            "reporter_kind": ["reporter_id"], "reporter_id": ["reporter_kind"],
        },
    },
    ("POST", f"{TASK}/deliver"): {
        "not": {"required": ["body", "report_id"]},
        # commands/reports.deliver: a reason only explains a forced delivery past open blockers.
        # That it needs ``force: true``, not just ``force``, is left to the board's 400: the
        # conditional that would say it multiplies the cases a schema-driven client generates.
        "dependentRequired": {"reason": ["force"]},
    },
    ("POST", f"{TASK}/sessions"): {"dependentRequired": {"owner_kind": ["owner_id"], "owner_id": ["owner_kind"]}},
}

# -- answers ------------------------------------------------------------------------------------

STRING: Final = {"type": "string"}
INTEGER: Final = {"type": "integer"}
OPTIONAL_STRING: Final = {"type": ["string", "null"]}
OPTIONAL_INTEGER: Final = {"type": ["integer", "null"]}
OBJECT: Final = {"type": "object"}
STRINGS: Final = {"type": "array", "items": STRING}


def closed(properties: dict[str, Any]) -> dict[str, Any]:
    """An object with exactly these members: a new field must be documented before it ships."""
    return {"type": "object", "required": list(properties), "additionalProperties": False, "properties": properties}


def page(item: dict[str, Any]) -> dict[str, Any]:
    return closed({"items": {"type": "array", "items": item}, "next_cursor": OPTIONAL_STRING})


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


_TASK_TYPES: Final[dict[str, dict[str, Any]]] = {
    "number": INTEGER,
    "kind": {"type": "string", "enum": list(domain.KINDS)},
    "priority": {"type": "string", "enum": list(domain.PRIORITIES)},
    "status": {"type": "string", "enum": list(domain.STATUSES)},
    "acceptance_mode": {"type": "string", "enum": list(domain.ACCEPTANCE_MODES)},
    "delivery_round": {"type": "integer", "minimum": 1},
    "version": {"type": "integer", "minimum": 1},
    "revision": OPTIONAL_INTEGER,
    "labels": STRINGS,
    "meta": OBJECT,
}
_TASK_REQUIRED_TEXT: Final = frozenset({"id", "identifier", "project_id", "title", "description", "created_at", "updated_at"})


def _task_schema() -> dict[str, Any]:
    from .queries.tasks import TASK_FIELDS  # the fields task_to_dict returns, in its order

    properties = {
        name: _TASK_TYPES.get(name, STRING if name in _TASK_REQUIRED_TEXT else OPTIONAL_STRING)
        for name in (*TASK_FIELDS, "labels", "meta")
    }
    # Identifiers of the open blockers (services/board/conditions/rules.py), sorted.
    properties["blocked_by"] = STRINGS
    return closed(properties)


COMPONENTS: Final[dict[str, dict[str, Any]]] = {
    "Task": _task_schema(),
    "Project": closed({
        "id": {"type": "string", "pattern": SLUG_PATTERN},
        "name": STRING,
        "prefix": STRING,
        "workspace_path": OPTIONAL_STRING,
        "readme": STRING,
        "meta": OBJECT,
        "settings": OBJECT,
        "revision": OPTIONAL_INTEGER,
        "created_at": STRING,
        "updated_at": STRING,
    }),
    "Comment": closed({
        "id": STRING, "task_id": STRING, "kind": {"type": "string", "enum": list(domain.COMMENT_KINDS)},
        "body": STRING, "actor_kind": STRING, "actor_id": STRING, "round": INTEGER, "created_at": STRING,
    }),
    "Report": closed({
        "id": STRING, "task_id": STRING, "round": INTEGER, "body": STRING,
        "actor_kind": STRING, "actor_id": STRING, "created_at": STRING,
    }),
    "Acceptance": closed({
        "task_id": STRING,
        "mode": {"type": "string", "enum": list(domain.ACCEPTANCE_MODES)},
        "revision": INTEGER,
        "items": {"type": "array", "items": closed({"id": STRING, "position": INTEGER, "text": STRING, "created_at": STRING})},
    }),
    "Relation": closed({
        "id": STRING, "type": {"type": "string", "enum": list(domain.RELATION_TYPES)},
        "source_id": STRING, "target_id": STRING, "created_at": STRING,
    }),
    "Session": closed({
        "id": STRING, "task_id": STRING, "owner_kind": STRING, "owner_id": STRING,
        "seg": {"type": "integer", "minimum": 0}, "phase": STRING,
        "status": {"type": "string", "enum": ["open", *sessions.CLOSE_STATUSES]},
        "created_at": STRING, "updated_at": STRING, "closed_at": OPTIONAL_STRING,
    }),
    "Attachment": closed({
        "id": STRING, "task_id": STRING, "filename": STRING, "content_type": STRING,
        "size": {"type": "integer", "minimum": 0, "maximum": domain.ATTACHMENT_MAX_BYTES},
        "sha256": STRING, "created_at": STRING, "updated_at": STRING,
    }),
    "Label": closed({
        "project_id": STRING, "name": STRING, "use_count": {"type": "integer", "minimum": 0},
        "created_at": STRING, "last_used_at": STRING, "archived_at": OPTIONAL_STRING,
    }),
    "Actor": closed({
        "kind": STRING, "id": STRING, "use_count": INTEGER, "first_seen_at": STRING, "last_seen_at": STRING,
    }),
    "Activity": closed({
        "id": INTEGER,
        "revision": OPTIONAL_INTEGER,
        "task_id": OPTIONAL_STRING,
        "project_id": OPTIONAL_STRING,
        "actor_kind": STRING,
        "actor_id": STRING,
        "event": {"type": "string", "enum": sorted(EVENT_SET | WIRE_NOISE)},
        "changes": OBJECT,
        "created_at": STRING,
    }),
}
COMPONENTS.update(_json_levels())
#: One line of a card's History (queries/history.py ``timeline``): the stamp, the phrase, the raw row.
COMPONENTS["HistoryEntry"] = closed({
    "at": STRING,
    "revision": OPTIONAL_INTEGER,
    "actor": closed({"kind": STRING, "id": STRING}),
    "event": STRING,
    "text": STRING,
    "changes": OBJECT,
    "activity_ids": {"type": "array", "items": INTEGER, "minItems": 1},
    "last_at": STRING,
})
COMPONENTS["ListedRelation"] = closed({
    **COMPONENTS["Relation"]["properties"],
    "direction": {"type": "string", "enum": ["outgoing", "incoming"]},
    "other": closed({"id": STRING, "identifier": STRING, "title": STRING, "status": {"type": "string", "enum": list(domain.STATUSES)}}),
})

_META: Final = {"board_id": STRING, "revision": {"type": "integer", "minimum": 0}, "floor": {"type": "integer", "minimum": 0}}

#: The 2xx body of every route, by (METHOD, path); a route missing here fails tests/integration/test_openapi.py.
RESPONSES: Final[dict[tuple[str, str], dict[str, Any]]] = {
    ("GET", f"{PREFIX}/meta"): closed({**_META, "version": STRING}),
    ("GET", f"{PREFIX}/openapi.json"): {"type": "object", "required": ["openapi", "info", "paths"]},
    ("POST", f"{PREFIX}/login-links"): closed({"url": STRING, "expires_in_seconds": {"type": "integer", "minimum": 1}}),
    ("POST", f"{PREFIX}/logout"): closed({"logged_out": {"type": "boolean"}}),
    ("POST", f"{PREFIX}/token/rotate"): closed({"rotated": {"const": True}, "token_file": STRING}),
    ("GET", f"{PREFIX}/board/status"): closed({
        **_META, "version": STRING, "pid": INTEGER, "data_dir": STRING, "database": STRING,
        "token_file": STRING, "uptime_seconds": {"type": "number", "minimum": 0},
        "log_rows": INTEGER, "log_bytes": INTEGER, "oldest_revision": OPTIONAL_INTEGER,
        "event_retention_days": OPTIONAL_INTEGER, "durability": {"type": "string", "enum": ["full", "normal"]},
    }),
    ("GET", f"{PREFIX}/projects"): page(ref("Project")),
    ("POST", f"{PREFIX}/projects"): ref("Project"),
    ("GET", f"{PREFIX}/projects/{{id}}"): ref("Project"),
    ("PATCH", f"{PREFIX}/projects/{{id}}"): ref("Project"),
    ("PUT", f"{PREFIX}/projects/{{id}}/readme"): ref("Project"),
    ("GET", f"{PREFIX}/tasks"): page(ref("Task")),
    ("POST", f"{PREFIX}/tasks"): ref("Task"),
    ("GET", TASK): ref("Task"),
    ("PATCH", TASK): ref("Task"),
    ("POST", f"{TASK}/claim"): ref("Task"),
    ("POST", f"{TASK}/heartbeat"): ref("Task"),
    ("POST", f"{TASK}/move"): ref("Task"),
    ("POST", f"{TASK}/reopen"): ref("Task"),
    ("POST", f"{TASK}/archive"): ref("Task"),
    ("GET", f"{TASK}/comments"): page(ref("Comment")),
    ("POST", f"{TASK}/comments"): ref("Comment"),
    ("POST", f"{TASK}/ask"): ref("Task"),
    ("GET", f"{PREFIX}/reports/template"): closed({
        "markdown": STRING, "required_sections": STRINGS, "optional_sections": STRINGS, "max_bytes": INTEGER,
    }),
    ("GET", f"{TASK}/reports"): page(ref("Report")),
    ("POST", f"{TASK}/report"): ref("Report"),
    ("POST", f"{TASK}/deliver"): ref("Task"),
    ("POST", f"{TASK}/waive"): ref("Task"),
    ("GET", f"{TASK}/acceptance"): ref("Acceptance"),
    ("POST", f"{TASK}/acceptance"): ref("Acceptance"),
    ("DELETE", f"{TASK}/acceptance/{{item}}"): ref("Acceptance"),
    ("GET", f"{TASK}/relations"): page(ref("ListedRelation")),
    ("POST", f"{TASK}/relations"): ref("Relation"),
    ("DELETE", f"{TASK}/relations/{{id}}"): ref("Relation"),
    ("GET", f"{PREFIX}/labels"): page(ref("Label")),
    ("POST", f"{PREFIX}/labels/gc"): closed({
        "archived": STRINGS, "kept": INTEGER, "mismatched": INTEGER,
        "ttl_days": INTEGER, "dry_run": {"type": "boolean"}, "revision": OPTIONAL_INTEGER,
    }),
    ("GET", f"{PREFIX}/actors"): page(ref("Actor")),
    ("GET", f"{TASK}/sessions"): page(ref("Session")),
    ("POST", f"{TASK}/sessions"): ref("Session"),
    ("POST", f"{TASK}/sessions/{{id}}/close"): ref("Session"),
    ("GET", f"{TASK}/attachments"): page(ref("Attachment")),
    ("POST", f"{TASK}/attachments"): ref("Attachment"),
    ("PUT", f"{PREFIX}/attachments/{{id}}"): ref("Attachment"),
    ("DELETE", f"{PREFIX}/attachments/{{id}}"): ref("Attachment"),
    ("GET", f"{PREFIX}/activities"): page(ref("Activity")),
    ("GET", f"{PREFIX}/breaches"): page(closed({
        "type": {"type": "string", "enum": sorted(CONDITION_SET)}, "project_id": STRING, "task_id": OPTIONAL_STRING,
        "changes": OBJECT, "since": STRING,
    })),
    ("GET", f"{TASK}/activities"): page(ref("Activity")),
    ("POST", f"{PREFIX}/export"): closed({
        "markdown": STRING,
        "task": closed({
            "id": STRING, "identifier": STRING, "status": {"type": "string", "enum": list(domain.STATUSES)},
            "revision": OPTIONAL_INTEGER,
        }),
    }),
    ("POST", f"{PREFIX}/state"): closed({
        "imported": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        "revision": INTEGER, "source_board_id": OPTIONAL_STRING,
    }),
    ("POST", f"{PREFIX}/admin/backup"): closed({
        "path": STRING, "board_id": STRING, "revision": INTEGER, "bytes": INTEGER,
        "seconds": {"type": "number", "minimum": 0},
        "blobs": {"type": "integer", "minimum": 0},
    }),
    ("POST", f"{PREFIX}/admin/compact"): closed({
        "floor": INTEGER, "previous_floor": INTEGER, "through": INTEGER, "removed": INTEGER,
        "archive": OPTIONAL_STRING, "dry_run": {"type": "boolean"},
    }),
    ("GET", f"{PREFIX}/admin/settings"): closed({"event_retention_days": OPTIONAL_INTEGER}),
    ("PATCH", f"{PREFIX}/admin/settings"): closed({"event_retention_days": OPTIONAL_INTEGER}),
    ("GET", f"{TASK}/history"): closed({
        "task": closed({
            "id": STRING, "identifier": STRING, "status": {"type": "string", "enum": list(domain.STATUSES)},
            "revision": OPTIONAL_INTEGER,
        }),
        "items": {"type": "array", "items": ref("HistoryEntry")},
        "archived_through": OPTIONAL_INTEGER,
    }),
}

#: Bodies that are not JSON, by (METHOD, path): media type → schema.
RAW_RESPONSES: Final[dict[tuple[str, str], dict[str, dict[str, Any]]]] = {
    # The stored bytes under the Content-Type they were uploaded with.
    ("GET", f"{PREFIX}/attachments/{{id}}"): {"*/*": {"schema": {"type": "string", "format": "binary"}}},
    # SPEC §6: Server-Sent Events; the schema describes one event as the SSE parser yields it.
    ("GET", f"{PREFIX}/events"): {"text/event-stream": {"schema": {"$ref": "#/components/schemas/StreamEvent"}}},
    # JSON lines: a header, the card state's rows, an end line (services/board/queries/state.py).
    ("GET", f"{PREFIX}/state"): {"application/x-ndjson": {"schema": {"type": "string"}}},
}

#: One event of ``GET /api/v1/events``: an activity frame (``id`` = its revision, ``data`` = the
#: frame as JSON), an id-only frame that moves the cursor past skipped rows, or a named signal
#: (``shutdown``) that carries no id (shared/sse.py).
COMPONENTS["StreamEvent"] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "pattern": f"^[0-9]+{END}"},
        # An activity frame has no event field, which SSE reads as the default type "message".
        "event": {"type": "string", "enum": ["message", "shutdown", "signal"]},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "retry": {"type": "integer", "minimum": 0},
    },
}

# -- links: where an answer's ids lead (OpenAPI 3.1 §4.8.20), beyond "a creator's id names the
# resource under its path" (openapi.links) --------------------------------------------------------

#: (source METHOD, path) → (target METHOD, path, link parameters, link requestBody or None).
EXTRA_LINKS: Final[list[tuple[tuple[str, str], tuple[str, str], dict[str, str], dict[str, str] | None]]] = [
    # A new project is where tasks are created.
    (("POST", f"{PREFIX}/projects"), ("POST", f"{PREFIX}/tasks"), {}, {"project": "$response.body#/id"}),
    # An attachment is addressed by its own id, outside the task's path.
    *[
        (("POST", f"{TASK}/attachments"), (method, f"{PREFIX}/attachments/{{id}}"), {"id": "$response.body#/id"}, None)
        for method in ("GET", "PUT", "DELETE")
    ],
    # The acceptance answer lists the items; the first one can be pruned.
    (
        ("POST", f"{TASK}/acceptance"),
        ("DELETE", f"{TASK}/acceptance/{{item}}"),
        {"ref": "$request.path.ref", "item": "$response.body#/items/0/id"},
        None,
    ),
]
