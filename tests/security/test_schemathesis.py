"""Schemathesis against a real ``taskd serve``: every check, every phase, bounded by counts, no finding allowed.

The run reads the board's own ``/api/v1/openapi.json`` and drives every operation with examples,
coverage cases, fuzzed positive and negative inputs and stateful sequences (following the links
it infers from the answers), then checks every answer against the document: status codes,
content types, headers, bodies, that schema-valid input is accepted and invalid input refused,
that undeclared methods get 405 with ``Allow``, that a missing or wrong token gets 401, and that
deleted resources stay deleted.

What the run configures, and why (nothing else is turned off):
- The token is read from the board's token file for every request (support_schemathesis.py),
  as ``taskctl`` does: the run rotates the token itself through ``POST /api/v1/token/rotate``.
- ``cursor`` query parameters get a cursor the board minted. A cursor is opaque by contract
  (SPEC §5): only a ``next_cursor`` the board returned is valid and anything else is a 400, which
  no schema can describe; so generated strings would be refused by design, not by mistake.
- Schema-valid requests may be refused with 422: every 422 code of SPEC §5's table is a rule on
  the board's state (``REPORT_INVALID`` for a report's markdown headings,
  ``RELATION_INVALID``/``_DEPTH``/``_FAN_IN`` for the task graph, ``APPROVAL_REQUIRED``,
  ``REPORT_REQUIRED``, ``REASON_REQUIRED`` for a forced write past open blockers), never to a
  malformed request, which is 400 and still a finding. No schema can know the state a request
  meets.
- ``GET /api/v1/events`` may answer 400 ``CURSOR_AHEAD`` to a schema-valid ``after``: SPEC §6.2
  refuses a cursor beyond the board's head revision with that status, and the head is state, not
  something the document can bound.
- A cursor below the retention floor is answered 410 ``CURSOR_EXPIRED`` (SPEC §6.2): the run
  itself may compact the log (``POST /api/v1/admin/compact``), and the floor is state too. For the
  same reason a compaction ``through`` a revision above the head may be 400.
- ``POST /api/v1/tasks/{ref}/deliver`` may answer 400 to ``force: false`` with a ``reason``: a
  reason explains a forced delivery past open blockers only (docs/conditions.md). The document
  says a reason needs ``force``; that it needs ``force: true`` would take a conditional schema,
  which the coverage phase expands into tens of thousands of cases.
- ``POST /api/v1/admin/backup`` is left out: it writes a file wherever its ``path`` says, and
  a generated absolute path would write on the machine running the tests (its coverage phase
  does not take a fixed value). Its refusals (relative, a directory, a missing directory, an
  existing file) are tested in tests/integration/test_backup_restore.py and its length cap in
  tests/integration/test_openapi.py.
- A project and tasks in each state are made first, and task references and project ids are
  drawn from them part of the time: generated names alone stop at 404 before any command runs.
- The board runs with ``--stream-lifetime`` so that each ``GET /api/v1/events`` ends (with its
  ``shutdown`` frame) instead of following the log for ever.
- The run is bounded by counts, never by a clock: a time budget cut the coverage phase wherever a
  busy machine happened to be, so which operations were tested, and whether the stateful phase
  ran at all, depended on the load. Two runs instead: the examples and coverage phases, then
  fuzzing and the stateful phase, each to completion.
- The coverage phase reads the document with free-form JSON (``meta``, ``settings``) nested
  ``COVERAGE_JSON_DEPTH`` levels, not 32: it enumerates boundary values at every level of the
  chain, which at 32 levels does not finish in an hour. The fuzzing and stateful run reads the
  real document, and the depth limit itself is proven exactly in tests/security/test_json_bounds.py
  and tests/integration/test_openapi.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from services.board import schemas
from services.board.queries.paging import encode_cursor
from shared import limits
from tests.support.board import REPORT, VENV_BIN, TaskdProcess

from .support_schemathesis import TOKEN_FILE_ENV

HOOKS = Path(__file__).with_name("support_schemathesis.py")
#: Test cases per operation in the fuzzing phase; stateful scenarios, and steps in each.
MAX_EXAMPLES = 8
STATEFUL_SCENARIOS = 40
STATEFUL_STEPS = 12
#: Nesting levels of free-form JSON in the coverage phase's document (see the module docstring).
COVERAGE_JSON_DEPTH = 3
#: A run that takes longer than this has hung (each run takes a few minutes on two busy cores).
RUN_TIMEOUT = 900
#: Seconds each SSE stream lives, so a streaming answer ends and can be checked.
STREAM_LIFETIME = 0.2
#: A fixed seed: a finding is reproduced by running the test again.
SEED = 20261201
ACTOR_HEADERS = {"X-Taskloom-Actor": "schemathesis", "X-Taskloom-Actor-Kind": "human"}
SEED_PROJECT = "fuzz"
#: How often a task reference or project id is one that exists.
REAL_NAMES = 0.6

#: List operations and the cursor the board mints for "after the first key" on each.
ROW_CURSOR = encode_cursor(0)
KEY_CURSOR = encode_cursor(("", ""))
CURSORS = {
    "^/api/v1/tasks$": ROW_CURSOR,
    "^/api/v1/activities$": ROW_CURSOR,
    "^/api/v1/tasks/\\{ref\\}/(activities|comments|reports)$": ROW_CURSOR,
    "^/api/v1/(labels|actors)$": KEY_CURSOR,
}
EVENTS = "^/api/v1/events$"
#: Schemathesis' default statuses for schema-valid data, plus 422 (see above).
ACCEPTED = ["2XX", "3XX", 401, 403, 404, 409, 410, 422, 429, "5XX"]
#: Schemathesis' default statuses for schema-violating data, plus 413 (a body over the size limit).
REJECTED = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429, "5XX"]
COMPACT = "^/api/v1/admin/compact$"
DELIVER = "^/api/v1/tasks/\\{ref\\}/deliver$"
BACKUP = "^/api/v1/admin/backup$"
#: Operations the run leaves out, each with its reason in the module docstring.
LEFT_OUT = (("POST", BACKUP),)


def config_toml(tasks: list[str]) -> str:
    """The run's schemathesis.toml (see the module docstring for each entry)."""
    lines = [
        f"seed = {SEED}",
        "[generation]",
        "deterministic = true",
        f"max-examples = {MAX_EXAMPLES}",
        "database = \"none\"",
        "[checks.positive_data_acceptance]",
        f"expected-statuses = {json.dumps(ACCEPTED)}",
        # Schema-violating data is refused; a violating body too large to read is refused as such.
        "[checks.negative_data_rejection]",
        f"expected-statuses = {json.dumps(REJECTED)}",
        "[phases.stateful]",
        f"max-steps = {STATEFUL_STEPS}",
        "[phases.stateful.generation]",
        f"max-examples = {STATEFUL_SCENARIOS}",
        # Real names some of the time, so requests reach the commands (and generated ones the rest).
        "[dictionaries.tasks]",
        f"values = {json.dumps(tasks)}",
        "[dictionaries.projects]",
        f"values = {json.dumps([SEED_PROJECT])}",
        "[parameters]",
        f"\"path.ref\" = {{ dictionary = \"tasks\", probability = {REAL_NAMES} }}",
        f"\"body.target\" = {{ dictionary = \"tasks\", probability = {REAL_NAMES} }}",
        f"\"body.ref\" = {{ dictionary = \"tasks\", probability = {REAL_NAMES} }}",
        f"\"body.project\" = {{ dictionary = \"projects\", probability = {REAL_NAMES} }}",
        f"\"query.project\" = {{ dictionary = \"projects\", probability = {REAL_NAMES} }}",
    ]
    for path_regex, cursor in CURSORS.items():
        lines += [
            "[[operations]]",
            f"include-path-regex = {json.dumps(path_regex)}",
            f"parameters = {{ \"query.cursor\" = {json.dumps(cursor)} }}",
        ]
    lines += [
        "[[operations]]",
        f"include-path-regex = {json.dumps(EVENTS)}",
        "include-method = \"GET\"",
        f"checks.positive_data_acceptance.expected-statuses = {json.dumps([*ACCEPTED, 400])}",
        "[[operations]]",
        f"include-path-regex = {json.dumps(COMPACT)}",
        f"checks.positive_data_acceptance.expected-statuses = {json.dumps([*ACCEPTED, 400])}",
        "[[operations]]",
        f"include-path-regex = {json.dumps(DELIVER)}",
        f"checks.positive_data_acceptance.expected-statuses = {json.dumps([*ACCEPTED, 400])}",
        "[[operations]]",
        f"include-path-regex = {json.dumps(BACKUP)}",
        "enabled = false",
    ]
    return "\n".join(lines) + "\n"


def call(url: str, token: str, method: str, path: str, body: Any = None) -> Any:
    """One JSON request as the run's actor; the seeding below must succeed."""
    headers = {"Authorization": f"Bearer {token}", **ACTOR_HEADERS}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(f"{url}{path}", data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


def seed(url: str, token: str) -> list[str]:
    """A project and a task in each kind of state, so generated requests reach the commands
    instead of stopping at 404; returns the task identifiers."""
    api = "/api/v1"
    call(url, token, "POST", f"{api}/projects", {"id": SEED_PROJECT, "workspace_path": "/srv/fuzz"})

    def task(**fields: Any) -> str:
        return call(url, token, "POST", f"{api}/tasks", {"project": SEED_PROJECT, "title": "Seeded", **fields})["identifier"]

    todo = task(labels=["seed"])
    backlog = task(status="backlog")
    epic = task(kind="epic")
    working = task()
    call(url, token, "POST", f"{api}/tasks/{working}/claim", {})
    review = task()
    call(url, token, "POST", f"{api}/tasks/{review}/claim", {})
    call(url, token, "POST", f"{api}/tasks/{review}/deliver", {"body": REPORT})
    done = task(acceptance_mode="none")
    call(url, token, "POST", f"{api}/tasks/{done}/claim", {})
    call(url, token, "POST", f"{api}/tasks/{done}/deliver", {"body": REPORT})
    call(url, token, "POST", f"{api}/tasks/{done}/move", {"to": "done"})
    call(url, token, "POST", f"{api}/tasks/{todo}/relations", {"type": "related", "target": working})
    call(url, token, "POST", f"{api}/tasks/{todo}/acceptance", {"items": ["the page loads"]})
    call(url, token, "POST", f"{api}/tasks/{todo}/comments", {"body": "a note"})
    return [todo, backlog, epic, working, review, done]


def fetch_document(url: str, token: str) -> bytes:
    request = urllib.request.Request(f"{url}/api/v1/openapi.json", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.read()


def shallow_json(document: dict[str, Any], depth: int) -> dict[str, Any]:
    """The document with the free-form JSON chain spelled out ``depth`` levels deep: the level
    below takes any value in the number range, so no case there claims a nesting the board
    allows is too deep, and the deeper levels are gone."""
    components = dict(document["components"]["schemas"])
    components[schemas.json_level(depth + 1)] = dict(schemas.NUMBER_RANGE)
    for level in range(depth + 2, limits.MAX_JSON_DEPTH + 2):
        del components[schemas.json_level(level)]
    return {**document, "components": {**document["components"], "schemas": components}}


def run_schemathesis(taskd: TaskdProcess, workdir: Path, document: Path, config: Path, phases: str) -> str:
    """One ``st run`` over ``phases``; returns its output after checking that it found nothing
    and tested every operation the run selects."""
    command = [
        str(VENV_BIN / "st"), "--config-file", str(config), "run", str(document),
        "--url", taskd.url,
        "--phases", phases,
        "--checks", "all",
        "--request-timeout", "10",
        "--workers", "1",
        "--no-color",
        *[arg for name, value in ACTOR_HEADERS.items() for arg in ("-H", f"{name}: {value}")],
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS), TOKEN_FILE_ENV: str(taskd.data_dir / "token")}
    run = subprocess.run(
        command, env=env, cwd=workdir, capture_output=True, text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL
    )
    (workdir / f"schemathesis-{phases.replace(',', '-')}.out").write_text(run.stdout + run.stderr)
    # The findings first (they sit between the progress lines and the warnings), then the summary.
    findings = run.stdout.partition("FAILURES")[2].partition("WARNINGS")[0]
    report = findings[:20000] + run.stdout.partition("SUMMARY")[2] + run.stderr[-4000:]
    assert run.returncode == 0, report
    assert "❌" not in run.stdout, report
    # It really ran: every operation of the document was tested.
    operations = sum(len(item) for item in json.loads(document.read_text())["paths"].values())
    assert f"Selected: {operations - len(LEFT_OUT)}/{operations}" in run.stdout, report
    assert f"Tested: {operations - len(LEFT_OUT)}" in run.stdout, report
    return run.stdout


def test_schemathesis_finds_nothing(taskd: TaskdProcess, tmp_path: Path) -> None:
    taskd.start("--stream-lifetime", str(STREAM_LIFETIME))
    full = json.loads(fetch_document(taskd.url, taskd.token))
    document = tmp_path / "openapi.json"
    document.write_text(json.dumps(full))
    coverage_document = tmp_path / "openapi-coverage.json"
    coverage_document.write_text(json.dumps(shallow_json(full, COVERAGE_JSON_DEPTH)))
    config = tmp_path / "schemathesis.toml"
    config.write_text(config_toml(seed(taskd.url, taskd.token)))

    covered = run_schemathesis(taskd, tmp_path, coverage_document, config, "examples,coverage")
    assert re.search(r"✅\s+Coverage", covered), covered[-3000:]
    fuzzed = run_schemathesis(taskd, tmp_path, document, config, "fuzzing,stateful")
    assert re.search(r"✅\s+Fuzzing", fuzzed), fuzzed[-3000:]
    # The stateful phase ran scenarios that followed the document's links.
    scenarios = re.search(r"Scenarios:\s+(\d+)", fuzzed)
    assert scenarios is not None and int(scenarios.group(1)) > 0, fuzzed[-3000:]
    assert taskd.process is not None and taskd.process.poll() is None, "the board survived the run"
    sys.stdout.write(covered[-1500:] + fuzzed[-3000:])
