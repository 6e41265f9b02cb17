"""Every size and depth limit of the product, in one place (SPEC §5: "one constant in shared/").

The caps are chosen from the bottom up so that the largest activity row the board can write always
fits every frame and line downstream of it:

    client text ──(field limits)──▶ changes ≤ MAX_CHANGES_BYTES
    changes + envelope ≤ MAX_ACTIVITY_BYTES                       (the frame JSON, SPEC §6.1)
    "data: " + activity ≤ SSE_MAX_LINE                            (the board's data line)
    SSE_MAX_LINE + HUB_EVENT_ENVELOPE_BYTES ≤ HUB_MAX_LINE        (the hub's ``event`` line, §7.3)

The last inequality holds for *anything* the SSE parser accepts, not only for what this board
writes: whatever the hub can read from a board, it can forward as one line its followers accept.
The asserts at the bottom check the arithmetic at import; ``tests/unit`` and
``tests/security/test_largest_row.py`` check that the field limits really produce rows that fit.

Text limits count characters (``len`` of a ``str``); byte budgets assume the worst encoding of one
character, ``JSON_CHAR_MAX_BYTES``: orjson writes a control character as ``\\u00XX`` (6 bytes) and
anything else as at most 4 bytes of UTF-8.
"""

from __future__ import annotations

from typing import Final

KIB: Final = 1024
MIB: Final = 1024 * KIB

#: The most bytes one character takes in orjson's output (``\\u001f``).
JSON_CHAR_MAX_BYTES: Final = 6

# -- request bodies (SPEC §5) ------------------------------------------------------------------

#: A JSON request body; larger → 413 PAYLOAD_TOO_LARGE.
MAX_BODY_BYTES: Final = 1 * MIB
#: One attachment's bytes (SPEC §4.4).
MAX_ATTACHMENT_BYTES: Final = 8 * MIB

# -- JSON values a client sends ----------------------------------------------------------------

#: Signed 64-bit, what SQLite stores as an INTEGER and its JSON functions read back exactly.
INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1
#: Nesting of arrays and objects inside one body field (``{"meta": {"a": [1]}}`` has meta at 2).
#: orjson refuses to encode past 254 levels and SQLite's JSON functions have their own limit; a
#: task board needs a handful.
MAX_JSON_DEPTH: Final = 32
#: Encoded size of one free-form JSON field (task meta, project meta, project settings).
MAX_JSON_FIELD_BYTES: Final = 64 * KIB

# -- text fields (characters) ------------------------------------------------------------------

TITLE_MAX_CHARS: Final = 500
PROJECT_NAME_MAX_CHARS: Final = 200
DESCRIPTION_MAX_CHARS: Final = 64 * KIB
README_MAX_CHARS: Final = 256 * KIB
COMMENT_MAX_CHARS: Final = 64 * KIB
#: A delivery report, in UTF-8 bytes (refused as 422 REPORT_INVALID by the report checker).
REPORT_MAX_BYTES: Final = 256 * KIB
#: Reasons (steal, move, reopen, waive, prune, override) are written into the activity row.
REASON_MAX_CHARS: Final = 1000
#: A list page: ``limit`` 1–1000, 100 when not given (SPEC §5, keyset pagination).
PAGE_LIMIT_MAX: Final = 1000
PAGE_LIMIT_DEFAULT: Final = 100
#: An explicit idempotency key; a derived one longer than this is shortened to a digest.
IDEM_MAX_CHARS: Final = 512
#: Actor names (headers, assignee/reporter, session owners).
ACTOR_ID_MAX_CHARS: Final = 200
ACTOR_KIND_MAX_CHARS: Final = 64
LABEL_MAX_CHARS: Final = 64
MAX_LABELS_PER_TASK: Final = 32
ACCEPTANCE_ITEM_MAX_CHARS: Final = 2000
MAX_ACCEPTANCE_ITEMS_PER_CHANGE: Final = 32
PHASE_MAX_CHARS: Final = 64
FILENAME_MAX_CHARS: Final = 255
CONTENT_TYPE_MAX_CHARS: Final = 255
#: A path the board is handed to write to (a backup's file): Linux's PATH_MAX.
PATH_MAX_CHARS: Final = 4096
#: A project's workspace path, in UTF-8 bytes. It is unique, and PostgreSQL's unique index holds at
#: most 2704 bytes of a row: a longer path that does not compress cannot be stored there, however
#: often it is retried, while SQLite would store it. So both engines take this many bytes, no more.
WORKSPACE_PATH_MAX_BYTES: Final = 2 * KIB
#: Labels one ``label gc`` run archives; the next run takes the rest.
MAX_LABEL_GC_BATCH: Final = 256
#: A text search (``GET /tasks?q=``): its length and its words, each word a clause of the query.
SEARCH_MAX_CHARS: Final = 200
SEARCH_MAX_WORDS: Final = 8
#: Retention and compaction ages, in days: a century is more than any board keeps, and a date that
#: far back is still one Python can compute (a larger count overflowed ``timedelta`` into a 500).
RETENTION_DAYS_MAX: Final = 36_500
#: Text an activity row carries verbatim (task_updated before/after, acceptance item text);
#: longer text names the field (or the item's id) only.
CHANGES_TEXT_MAX_CHARS: Final = 200

# -- the activity row and the frames that carry it ---------------------------------------------

#: The encoded ``changes`` of one activity row. Refused at ``Tx.record`` (nothing written) if a
#: command ever produced more; the field limits above keep every real command far below it.
MAX_CHANGES_BYTES: Final = 60 * KIB
#: The frame around ``changes``: ids and revision (≤ 20 digits each), task uuid, project slug,
#: actor kind and id (≤ 264 characters), event name, timestamp, key names.
ACTIVITY_ENVELOPE_BYTES: Final = 4 * KIB
#: One activity frame's JSON (SPEC §6.1), what ``data:`` and the hub's ``activity`` carry.
MAX_ACTIVITY_BYTES: Final = MAX_CHANGES_BYTES + ACTIVITY_ENVELOPE_BYTES

#: One NDJSON line of the hub's local protocol, either direction, before the ``\n`` (SPEC §7.3).
HUB_MAX_LINE: Final = 1 * MIB
#: ``{"type":"event","revision":<20 digits>,"activity":`` + ``}``: 50 bytes, rounded up.
HUB_EVENT_ENVELOPE_BYTES: Final = 256
#: One SSE line, and one message's accumulated data (the parser's cap, SPEC §6.1).
SSE_MAX_LINE: Final = HUB_MAX_LINE - HUB_EVENT_ENVELOPE_BYTES
SSE_DATA_PREFIX_BYTES: Final = len(b"data: ")

# The arithmetic of the module docstring. An edit that breaks it fails at import, everywhere.
assert CHANGES_TEXT_MAX_CHARS * JSON_CHAR_MAX_BYTES * 2 * 10 < MAX_CHANGES_BYTES  # task_updated: 10 fields, before+after
assert MAX_ACCEPTANCE_ITEMS_PER_CHANGE * (CHANGES_TEXT_MAX_CHARS * JSON_CHAR_MAX_BYTES + 64) < MAX_CHANGES_BYTES
assert (ACTOR_ID_MAX_CHARS + ACTOR_KIND_MAX_CHARS) * JSON_CHAR_MAX_BYTES + 512 < ACTIVITY_ENVELOPE_BYTES
assert MAX_CHANGES_BYTES + ACTIVITY_ENVELOPE_BYTES <= MAX_ACTIVITY_BYTES
assert SSE_DATA_PREFIX_BYTES + MAX_ACTIVITY_BYTES <= SSE_MAX_LINE
assert SSE_MAX_LINE + HUB_EVENT_ENVELOPE_BYTES <= HUB_MAX_LINE
