"""The words ``agent`` and ``taskd`` are never written as an actor kind (SPEC §4.1).

``agent`` names a category, not a writer; ``taskd`` would put the service process on the record.
The board's own housekeeping is ``system``. The scan looks at kind positions only — ``Actor(...)``,
``*_kind`` arguments, defaults and assignments, ``--actor-kind`` options, SQL and header literals —
so the program name ``taskd`` in logs, help text and command lines is left alone.
"""

from __future__ import annotations

import pytest

from .sourcescan import ROOT, kind_violations_in, parse, parse_text, python_files, relative, text_kind_violations

SCANNED = ("services", "shared", "taskctl")
TEXT_SUFFIXES = {".js", ".mjs", ".html", ".service", ".plist", ".sh", ".toml", ".json", ".env"}


def test_python_sources_write_no_forbidden_kind() -> None:
    paths = python_files(*SCANNED)
    assert len(paths) > 20
    hits = [hit for path in paths for hit in kind_violations_in(parse(path), relative(path))]
    assert hits == [], "use the platform name (claude, codex, ...), human, or system"


def test_other_sources_and_units_write_no_forbidden_kind() -> None:
    hits = []
    for folder in SCANNED:  # the unit templates live in services/subscriber/deploy/
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                hits.extend(text_kind_violations(path.read_text(encoding="utf-8", errors="replace"), relative(path)))
    assert hits == []


@pytest.mark.parametrize(
    "snippet",
    [
        'Actor("agent", "worker-1")',
        'Actor(kind="taskd", id="board")',
        'SYSTEM = store.Actor("taskd", "board")',
        'client.post(path, actor_kind="agent")',
        'def resolve(actor_id, actor_kind="agent"): ...',
        'def resolve(*, owner_kind: str = "taskd"): ...',
        'actor_kind = kind or env.get("TASKLOOM_ACTOR_KIND") or "agent"',
        'kind = env.get("TASKLOOM_ACTOR_KIND", "taskd")',
        'self.kind = "agent"',
        'headers["X-Taskloom-Actor-Kind"] = "agent"',
        'frame = {"actor_kind": "taskd", "actor_id": "board"}',
        'click.option("--actor-kind", default="agent")',
        'os.environ.setdefault("TASKLOOM_ACTOR_KIND", "agent")',
        '''tx.execute("INSERT INTO comments (actor_kind, actor_id) VALUES ('taskd', 'board')")''',
    ],
)
def test_the_scan_catches_kind_positions(snippet: str) -> None:
    assert kind_violations_in(parse_text(snippet), "snippet.py"), snippet


@pytest.mark.parametrize(
    "snippet",
    [
        'log = structlog.get_logger("taskd")',
        'subprocess.Popen([str(VENV_BIN / "taskd"), "serve", "--port", "0"])',
        'click.echo("start it with: taskd serve")',
        '@click.group(name="taskd")\ndef main(): ...',
        'Actor("claude", "agent-7")',
        'if kind == "agent": kind = "claude"',
        'Actor("system", "taskd")',
        'HELP = "--actor-kind names the platform, e.g. claude"',
    ],
)
def test_the_scan_leaves_the_program_name_alone(snippet: str) -> None:
    assert kind_violations_in(parse_text(snippet), "snippet.py") == [], snippet


@pytest.mark.parametrize(
    ("line", "flagged"),
    [
        ('headers: {"X-Taskloom-Actor-Kind": "agent"}', True),
        ("Environment=TASKLOOM_ACTOR_KIND=taskd", True),
        ("ExecStart=/usr/bin/taskctl loop subscribe --actor-kind agent", True),
        ("const actor = {kind: 'agent', id: 'w'};", True),
        ("ExecStart=/home/me/.venv/bin/taskd serve --port 7431", False),
        ("if (frame.actor_kind === 'agent') {}", False),
        ("Environment=TASKLOOM_ACTOR_KIND=claude", False),
    ],
)
def test_the_text_scan(line: str, flagged: bool) -> None:
    assert bool(text_kind_violations(line, "unit")) is flagged
