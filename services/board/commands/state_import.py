"""Importing a state export (``POST /api/v1/state``) into a board that has no projects yet.

Two steps, so that a bad file writes nothing: :func:`parse_state` reads and checks every line
first (a refusal names its line number), then :func:`import_state` inserts everything in one
transaction and ends with one ``import_completed`` row (actor ``system:state-import``). Ids,
identifiers and each project's ``next_number`` are kept, so references into the old board
(``DEMO-0007``, a task uuid in a commit message) still resolve. The schema's triggers check every
row as for any other writer; one that refuses rolls the whole import back.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from shared import domain, events, limits
from shared.errors import TaskloomError, validation
from shared.json_bounds import check_free_form
from shared.timestamps import is_timestamp

from ..conditions import config as conditions_config
from ..conditions import rules
from ..queries.state import END_KIND, KIND_BY_NAME, KINDS, STATE_KIND, STATE_VERSION, Kind
from ..store import Actor, Tx
from .attachments import check_content_type, check_filename, ensure_blob
from .common import normalise_labels

#: Who writes the import's one activity row.
IMPORTER: Final = Actor("system", "state-import")

_INTS: Final = frozenset({"next_number", "use_count", "number", "delivery_round", "version", "acceptance_revision",
                          "round", "position", "seg", "size"})
_OBJECTS: Final = frozenset({"meta", "settings"})
_LISTS: Final = frozenset({"labels"})
_NULLABLE: Final[dict[str, frozenset[str]]] = {
    "project": frozenset({"workspace_path"}),
    "label": frozenset({"archived_at"}),
    "task": frozenset({"assignee_kind", "assignee_id", "reporter_kind", "reporter_id", "claimed_by_kind",
                       "claimed_by", "claimed_at", "heartbeat_at", "delivered_by", "waiver_reason",
                       "awaiting_reason", "blocked_reason", "idem", "terminal_at", "archived_at", "status_since"}),
    "session": frozenset({"closed_at"}),
}
#: Fields a file may lack because exports written before them did not carry them; each is filled
#: in as the schema migration that added it filled in the board's own rows.
_ADDED_LATER: Final[dict[str, frozenset[str]]] = {
    "task": frozenset({"status_since"}),  # migration 0006: when the card entered its status
}
_CHOICES: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    ("task", "status"): domain.STATUSES,
    ("task", "kind"): domain.KINDS,
    ("task", "priority"): domain.PRIORITIES,
    ("task", "acceptance_mode"): domain.ACCEPTANCE_MODES,
    ("comment", "kind"): domain.COMMENT_KINDS,
    ("relation", "type"): domain.RELATION_TYPES,
}
#: The longest text each field may hold: what the commands that write it allow. An export holds
#: nothing longer; a hand-edited file past one would leave a row no command could have written,
#: and the frame arithmetic of shared/limits.py (a claim's row carries its holder's name) assumes
#: none. A report body and a workspace path are counted in UTF-8 bytes (``_BYTE_LIMITS``), as
#: their commands count them.
_ACTOR_IDS: Final = {("task", "assignee_id"), ("task", "reporter_id"), ("task", "claimed_by"), ("task", "delivered_by"),
                     ("comment", "actor_id"), ("report", "actor_id"), ("session", "owner_id"), ("actor", "id")}
_ACTOR_KINDS: Final = {("task", "assignee_kind"), ("task", "reporter_kind"), ("task", "claimed_by_kind"),
                       ("comment", "actor_kind"), ("report", "actor_kind"), ("session", "owner_kind"), ("actor", "kind")}
_TEXT_LIMITS: Final[dict[tuple[str, str], int]] = {
    **dict.fromkeys(_ACTOR_IDS, limits.ACTOR_ID_MAX_CHARS), **dict.fromkeys(_ACTOR_KINDS, limits.ACTOR_KIND_MAX_CHARS),
    ("task", "title"): limits.TITLE_MAX_CHARS, ("task", "description"): limits.DESCRIPTION_MAX_CHARS,
    ("task", "idem"): limits.IDEM_MAX_CHARS, ("task", "awaiting_reason"): limits.REASON_MAX_CHARS,
    ("task", "blocked_reason"): limits.REASON_MAX_CHARS, ("task", "waiver_reason"): limits.REASON_MAX_CHARS,
    ("project", "name"): limits.PROJECT_NAME_MAX_CHARS, ("project", "readme"): limits.README_MAX_CHARS,
    ("label", "name"): limits.LABEL_MAX_CHARS,
    ("comment", "body"): limits.COMMENT_MAX_CHARS, ("acceptance_item", "text"): limits.ACCEPTANCE_ITEM_MAX_CHARS,
    ("session", "phase"): limits.PHASE_MAX_CHARS,
}
_BYTE_LIMITS: Final[dict[tuple[str, str], int]] = {
    ("report", "body"): limits.REPORT_MAX_BYTES, ("project", "workspace_path"): limits.WORKSPACE_PATH_MAX_BYTES,
}

#: Texts a write never leaves blank (empty or only spaces): a title, a comment, an actor's kind and id.
_NOT_BLANK: Final = {("task", "title"), ("comment", "body"), *_ACTOR_IDS, *_ACTOR_KINDS}
#: The least value a write leaves in these integers: a version starts at 1 and only rises, task
#: numbers and delivery rounds count from 1 (a comment and a report carry their card's round), an
#: acceptance item's position and a use count from 0.
_LEAST: Final[dict[tuple[str, str], int]] = {
    ("task", "version"): 1, ("task", "number"): 1, ("comment", "round"): 1, ("report", "round"): 1,
    ("acceptance_item", "position"): 0, ("actor", "use_count"): 0, ("label", "use_count"): 0,
}

#: The ids the board makes itself (commands/common.new_id, commands/sessions.session_id), by kind.
#: Any other text is a row no command writes, and a task is found by id before its identifier
#: (queries/tasks.find_task): a card whose id was another's ``DEMO-0001`` would answer for it.
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ID_SHAPES: Final[dict[str, tuple[re.Pattern[str], str]]] = {
    **dict.fromkeys(("task", "comment", "relation", "report", "acceptance_item", "attachment"), (_UUID, "a lowercase uuid")),
    "session": (re.compile(r"ses_[0-9a-f]{24}"), "ses_ and 24 hex digits"),
}


def _is_timestamp_field(name: str) -> bool:
    return name.endswith("_at") or name == "status_since"


#: Fields naming a task that must be in the same file.
_TASK_REFERENCES: Final[dict[str, tuple[str, ...]]] = {
    "comment": ("task_id",), "report": ("task_id",), "acceptance_item": ("task_id",), "session": ("task_id",),
    "attachment": ("task_id",), "relation": ("source_id", "target_id"),
}


@dataclass
class ParsedState:
    """A checked export: the rows of each kind in file order, and the blobs to write first."""

    header: dict[str, Any]
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {kind.name: [] for kind in KINDS})
    blobs: dict[str, bytes] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {kind.name: len(self.rows[kind.name]) for kind in KINDS}


def _refuse(line: int, message: str, **details: Any) -> TaskloomError:
    return validation(f"line {line}: {message}; nothing was imported", line=line, **details)


@functools.cache
def _spec(kind_name: str) -> tuple[tuple[tuple[str, str, bool], ...], frozenset[str]]:
    """Per kind, once: each field with its type word and whether it may be null; the field set."""
    kind = KIND_BY_NAME[kind_name]
    nullable = _NULLABLE.get(kind_name, frozenset())
    fields = []
    for column in kind.columns:
        name = kind.field(column)
        word = "int" if name in _INTS else "object" if name in _OBJECTS else "list" if name in _LISTS else "text"
        fields.append((name, word, name in nullable))
    return tuple(sorted(fields)), frozenset(name for name, _, _ in fields)


def _check_field(line: int, kind: Kind, name: str, word: str, nullable: bool, value: Any) -> None:
    if value is None:
        if not nullable:
            raise _refuse(line, f"{kind.name}.{name} must not be null", field=name)
        return
    if word == "text":
        if type(value) is not str or "\x00" in value:
            raise _refuse(line, f"{kind.name}.{name} must be a text without U+0000", field=name)
        if (kind.name, name) in _NOT_BLANK and not value.strip():
            raise _refuse(line, f"{kind.name}.{name} must not be blank", field=name)
        limit = _TEXT_LIMITS.get((kind.name, name))
        if limit is not None and len(value) > limit:
            raise _refuse(line, f"{kind.name}.{name} is longer than {limit} characters", field=name, limit=limit)
        byte_limit = _BYTE_LIMITS.get((kind.name, name))
        if byte_limit is not None and len(value.encode()) > byte_limit:
            raise _refuse(line, f"{kind.name}.{name} is larger than {byte_limit} bytes", field=name, limit=byte_limit)
        if _is_timestamp_field(name) and not is_timestamp(value):
            # The conditions and the archive read these back as times: a 500 there, for good.
            raise _refuse(line, f"{kind.name}.{name} must be a timestamp (YYYY-MM-DDTHH:MM:SS.mmmZ), not {value[:40]!r}",
                          field=name)
    elif word == "int":
        if type(value) is not int or not limits.INT64_MIN <= value <= limits.INT64_MAX:
            raise _refuse(line, f"{kind.name}.{name} must be an integer", field=name)
        least = _LEAST.get((kind.name, name))
        if least is not None and value < least:
            raise _refuse(line, f"{kind.name}.{name} is at least {least}, not {value}", field=name, least=least)
    elif word == "object":
        if not isinstance(value, dict):
            raise _refuse(line, f"{kind.name}.{name} must be an object", field=name)
        check_free_form(value, field=f"line {line}: {kind.name}.{name}")
    elif (not isinstance(value, list) or len(value) > limits.MAX_LABELS_PER_TASK
          or not all(type(item) is str and 0 < len(item) <= limits.LABEL_MAX_CHARS and "\x00" not in item
                     for item in value)):
        # U+0000 as in a text: PostgreSQL reads the list as jsonb to filter by label, which cannot
        # hold it, so every label filter over the card would be refused there.
        raise _refuse(line, f"{kind.name}.{name} must be a list of at most {limits.MAX_LABELS_PER_TASK} texts of"
                      f" 1 to {limits.LABEL_MAX_CHARS} characters without U+0000", field=name)
    choices = _CHOICES.get((kind.name, name))
    if choices is not None and value not in choices:
        raise _refuse(line, f"{kind.name}.{name} must be one of {', '.join(choices)}", field=name, value=value)


def _check_header(line: int, record: Any) -> dict[str, Any]:
    if not isinstance(record, dict) or record.get("kind") != STATE_KIND:
        raise _refuse(line, f"the first line must be the header {{\"kind\": \"{STATE_KIND}\", \"version\": …}}")
    if record.get("version") != STATE_VERSION:
        raise _refuse(line, f"unknown export version {record.get('version')!r}; this board reads version {STATE_VERSION}",
                      version=record.get("version"))
    return record


class _Keys:
    """The primary keys and unique values seen so far, to refuse duplicates and dangling references."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, Any], int] = {}

    def add(self, line: int, what: str, key: Any) -> None:
        first = self.seen.setdefault((what, key), line)
        if first != line:
            raise _refuse(line, f"duplicate {what} {key!r} (first on line {first})", duplicate=str(key))

    def has(self, what: str, key: Any) -> bool:
        return (what, key) in self.seen


def _check_row(line: int, kind: Kind, line_record: dict[str, Any], keys: _Keys, state: ParsedState) -> dict[str, Any]:
    outer = {"kind", "row", "data"} if kind.name == "attachment" else {"kind", "row"}
    if set(line_record) != outer or not isinstance(line_record["row"], dict):
        raise _refuse(line, f"a {kind.name} line is {{{', '.join(sorted(outer))}}} with row an object")
    record: dict[str, Any] = line_record["row"]
    fields, expected = _spec(kind.name)
    record = {**dict.fromkeys(_ADDED_LATER.get(kind.name, ())), **record}
    if record.keys() != expected:
        missing, unknown = sorted(expected - set(record)), sorted(set(record) - expected)
        raise _refuse(line, f"a {kind.name} row must have exactly its fields"
                      + (f"; missing: {', '.join(missing)}" if missing else "")
                      + (f"; unknown: {', '.join(unknown)}" if unknown else ""), missing=missing, unknown=unknown)
    for name, word, nullable in fields:
        _check_field(line, kind, name, word, nullable, record[name])
    if kind.name in _ID_SHAPES:
        shape, words = _ID_SHAPES[kind.name]
        if not shape.fullmatch(record["id"]):
            raise _refuse(line, f"{kind.name}.id {record['id'][:64]!r} is not an id the board makes ({words})", field="id")
    if kind.name == "project":
        try:
            conditions_config.check(record["settings"])  # what a project write would refuse (SPEC §12)
        except TaskloomError as exc:
            raise _refuse(line, f"project {record['id']!r}: {exc.message}", **exc.details) from None
        keys.add(line, "project", record["id"])
        keys.add(line, "project prefix", record["prefix"])
    elif kind.name == "label":
        _require(line, keys, "project", record["project_id"])
        _check_labels(line, "label.name", [record["name"]])
        keys.add(line, "label", (record["project_id"], record["name"]))
    elif kind.name == "actor":
        keys.add(line, "actor", (record["kind"], record["id"]))
    elif kind.name == "task":
        _check_labels(line, "task.labels", record["labels"])
        if (record["claimed_by"] is None) != (record["claimed_by_kind"] is None):
            # A claim writes both and a release clears both (the schema holds the assignee's and
            # the reporter's pairs itself): one half is a holder no claim or heartbeat can name.
            raise _refuse(line, f"task {record['id']!r}: claimed_by and claimed_by_kind are both set or both null",
                          field="claimed_by")
        if record["archived_at"] is not None and record["status"] not in domain.TERMINAL:
            # Only a done or canceled card is archived, and an archived one is never reopened or
            # moved: a live card with the mark would be out of every list and stuck there.
            raise _refuse(line, f"task {record['id']!r}: only a done or canceled task is archived, not a"
                          f" {record['status']} one", field="archived_at")
        if record["status_since"] is None:
            record["status_since"] = record["updated_at"]  # the status cannot have been entered later
        _require(line, keys, "project", record["project_id"])
        # An identifier is its project's prefix and its number: one that says another number would
        # be taken by the task created with it, and every create in that project would fail.
        prefix = next(p["prefix"] for p in state.rows["project"] if p["id"] == record["project_id"])
        if record["identifier"] != f"{prefix}-{record['number']:04d}":
            raise _refuse(line, f"task {record['id']!r}: its identifier {record['identifier']!r} is not"
                          f" {prefix}-{record['number']:04d}, its project's prefix and its number", field="identifier")
        keys.add(line, "task", record["id"])
        keys.add(line, "task identifier", record["identifier"])
        keys.add(line, "task number", (record["project_id"], record["number"]))
    else:
        keys.add(line, kind.name, record["id"])
        for name in _TASK_REFERENCES.get(kind.name, ()):
            _require(line, keys, "task", record[name])
    if kind.name == "attachment":
        try:  # what an upload of it would refuse: a path in the name, an odd content type
            check_filename(record["filename"])
            stored = check_content_type(record["content_type"])
        except TaskloomError as exc:
            raise _refuse(line, f"attachment {record['id']!r}: {exc.message}", **exc.details) from None
        if stored != record["content_type"]:
            # An upload stores it trimmed, and none as the default: any other text is a row no
            # upload writes, and an empty one is served as an empty Content-Type header.
            raise _refuse(line, f"attachment {record['id']!r}: content_type {record['content_type']!r} is not as an"
                          f" upload stores it ({stored!r})", field="content_type")
        state.blobs[record["sha256"]] = _attachment_bytes(line, record, line_record["data"])
    return record


def _check_labels(line: int, where: str, names: list[str]) -> None:
    """Labels as a write stores them (trimmed, lower case, each once). The filter ``?label=``
    normalises the name it asks for the same way, so a card holding 'UI' could never be found."""
    try:
        stored = normalise_labels(names)
    except TaskloomError as exc:
        raise _refuse(line, f"{where}: {exc.message}", field=where) from None
    if stored != names:
        raise _refuse(line, f"{where} {names!r} is not as a write stores it ({stored!r})", field=where)


def _require(line: int, keys: _Keys, what: str, key: Any) -> None:
    if not keys.has(what, key):
        raise _refuse(line, f"refers to {what} {key!r}, which is not in the file before this line", missing=str(key))


def _attachment_bytes(line: int, record: dict[str, Any], data: Any) -> bytes:
    if not isinstance(data, str):
        raise _refuse(line, "attachment.data must be the bytes as base64 text", field="data")
    try:
        blob = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise _refuse(line, "attachment.data is not valid base64", field="data") from None
    if len(blob) > domain.ATTACHMENT_MAX_BYTES:
        raise _refuse(line, f"an attachment is at most {domain.ATTACHMENT_MAX_BYTES} bytes", field="data")
    digest = hashlib.sha256(blob).hexdigest()
    if digest != record["sha256"] or len(blob) != record["size"]:
        raise _refuse(line, f"attachment {record['id']}'s bytes do not match its sha256 and size", field="data",
                      sha256=record["sha256"], actual=digest)
    return blob


def parse_state(lines: Iterable[bytes]) -> ParsedState:
    """Read and check a whole export; raises 400 naming the first bad line. Pure: writes nothing."""
    state: ParsedState | None = None
    keys = _Keys()
    order = {kind.name: position for position, kind in enumerate(KINDS)}
    last_kind = -1
    ended = 0
    number = 0
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            raise _refuse(number, "an empty line")
        if ended:
            raise _refuse(number, f"a line after the end line (line {ended})")
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise _refuse(number, f"not a JSON object ({exc}); a truncated file?") from None
        if state is None:
            state = ParsedState(_check_header(number, record))
            continue
        if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
            raise _refuse(number, "every line is a JSON object with a kind")
        name = record["kind"]
        if name == END_KIND:
            _check_end(number, record, state)
            ended = number
            continue
        kind = KIND_BY_NAME.get(name)
        if kind is None:
            raise _refuse(number, f"unknown kind {name!r}", kind=name[:64])
        if order[name] < last_kind:
            raise _refuse(number, f"a {name} line after the {KINDS[last_kind].name} lines: kinds come in file order")
        last_kind = order[name]
        state.rows[name].append(_check_row(number, kind, record, keys, state))
    if state is None:
        raise _refuse(1, "the file is empty")
    if not ended:
        raise _refuse(number + 1, "the end line is missing: the file is truncated")
    _check_counters(state)
    _check_waits(state, keys)
    return state


def _check_waits(state: ParsedState, keys: _Keys) -> None:
    """No two cards of the file may wait for each other through any mix of children and blockers:
    neither could ever finish. ``add_relation`` refuses such a relation (commands/relations.py);
    an export from a board older than that rule may hold one, and the schema's triggers see only
    rings of one relation type. Which relation makes which card wait is ``rules.WAITS``, as for
    the command. One pass finds whether there is a ring at all; only then is the relation that
    closes it looked for, in file order, to name its line."""
    waits = [pair for relation in state.rows["relation"] if (pair := rules.waits(relation)) is not None]
    if not _has_ring(waits):
        return
    graph: dict[str, set[str]] = {}
    identifiers = {task["id"]: task["identifier"] for task in state.rows["task"]}
    for relation in state.rows["relation"]:
        pair = rules.waits(relation)
        if pair is None:
            continue
        waiter, awaited = pair
        if _reaches(graph, awaited, waiter):
            source, target = identifiers[relation["source_id"]], identifiers[relation["target_id"]]
            raise _refuse(
                keys.seen[("relation", relation["id"])],
                f"{source} {relation['type']} {target} would make {identifiers[awaited]} and {identifiers[waiter]} "
                f"wait for each other (through children or blockers), and neither could ever finish; remove it on the "
                f"board the file came from (taskctl relation remove) and export again",
                relation=relation["id"],
            )
        graph.setdefault(waiter, set()).add(awaited)


def _has_ring(edges: list[tuple[str, str]]) -> bool:
    graph: dict[str, list[str]] = {}
    for waiter, awaited in edges:
        graph.setdefault(waiter, []).append(awaited)
    done: set[str] = set()
    for start in graph:
        if start in done:
            continue
        on_path, stack = {start}, [(start, iter(graph[start]))]
        while stack:
            node, following = stack[-1]
            step = next(following, None)
            if step is None:
                stack.pop()
                on_path.discard(node)
                done.add(node)
            elif step in on_path:
                return True
            elif step not in done:
                on_path.add(step)
                stack.append((step, iter(graph.get(step, ()))))
    return False


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, pending = {start}, [start]
    while pending:
        node = pending.pop()
        if node == goal:
            return True
        for step in graph.get(node, ()):
            if step not in seen:
                seen.add(step)
                pending.append(step)
    return False


def _check_end(line: int, record: dict[str, Any], state: ParsedState) -> None:
    if record.get("counts") != state.counts():
        raise _refuse(line, f"the end line counts {record.get('counts')!r} but the file holds {state.counts()!r}: "
                      "lines are missing")


def _check_counters(state: ParsedState) -> None:
    """A project's next number is past all its tasks: the next task created must not collide."""
    highest: dict[str, int] = {}
    for task in state.rows["task"]:
        highest[task["project_id"]] = max(highest.get(task["project_id"], 0), task["number"])
    for project in state.rows["project"]:
        if project["next_number"] <= highest.get(project["id"], 0):
            raise validation(
                f"project {project['id']}'s next_number {project['next_number']} is not past its tasks "
                f"(highest number {highest[project['id']]}); nothing was imported",
                project=project["id"],
            )


def require_empty(tx_or_conn: Any) -> None:
    row = tx_or_conn.execute("SELECT count(*) FROM projects").fetchone()
    if row[0]:
        raise TaskloomError(
            "BOARD_NOT_EMPTY",
            f"this board already has {row[0]} project(s); a state import goes into a board without projects",
            details={"projects": row[0]},
            hint="start a board on a new data directory (taskd serve --data-dir DIR) and import there",
        )


def _insert(tx: Tx, kind: Kind, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    columns = ", ".join(kind.columns)
    marks = ", ".join("?" for _ in kind.columns)
    sql = f"INSERT INTO {kind.table} ({columns}) VALUES ({marks})"
    for row in rows:
        tx.execute(sql, tuple(
            orjson.dumps(row[kind.field(c)]).decode() if c in kind.json_columns else row[c] for c in kind.columns
        ))


def _in_creation_order(kind: Kind, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows in the order the old board made them. Lists "in creation order" (the tasks, the
    ready queue, a task's comments and reports) read by rowid, which each engine gives in insertion
    order; the file holds a kind in primary-key order (a project's tasks together, comments by a
    random id), so inserted as read they would list shuffled. The sort is stable: rows made in
    the same millisecond keep their file order."""
    if "created_at" not in kind.columns:
        return rows
    return sorted(rows, key=lambda row: row["created_at"])


def import_state(tx: Tx, state: ParsedState, root: Path) -> dict[str, Any]:
    """Insert a parsed export in this one transaction. On SQLite the blobs are already on disk
    (``root``), written before it, and checked again here: a refused import running beside this one
    may have removed one meanwhile. A database that keeps them (PostgreSQL) gets them here, so a
    refused import leaves none."""
    require_empty(tx)
    for sha256, blob in state.blobs.items():
        ensure_blob(tx, root, sha256, blob)
    for kind in KINDS:
        _insert(tx, kind, _in_creation_order(kind, state.rows[kind.name]))
    counts = state.counts()
    revision = tx.record(
        events.IMPORT_COMPLETED,
        events.import_completed(
            projects=counts["project"], labels=counts["label"], actors=counts["actor"], tasks=counts["task"],
            comments=counts["comment"], relations=counts["relation"], reports=counts["report"],
            acceptance_items=counts["acceptance_item"], sessions=counts["session"], attachments=counts["attachment"],
        ),
        task_id=None,
        project_id=None,
    )
    return {"imported": counts, "revision": revision, "source_board_id": state.header.get("board_id")}
