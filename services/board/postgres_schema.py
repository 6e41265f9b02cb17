"""The PostgreSQL schema's rules are really there: every trigger the migrations define exists and
is enabled, checked at each start, recreated on request (``taskd serve --repair-schema``).

The SQLite file has its own check (``sqlite_store.verify_triggers``). PostgreSQL can lose a rule
in more ways than SQLite: a trigger can be *disabled* (``ALTER TABLE … DISABLE TRIGGER``) or left
to fire only under the replica role (``ENABLE REPLICA TRIGGER``, what replication tooling leaves
behind), every session can be given that role (``ALTER DATABASE … SET session_replication_role``,
refused here: the board cannot undo it), and dropping a trigger *function*
with ``CASCADE`` takes its triggers with it. All are found here, and the repair recreates the
function from the migrations before the trigger that calls it.

The definitions are read from the migration SQL itself, so the list cannot drift from what the
schema creates. The check is by name, as on SQLite: a trigger or function replaced under the
same name with another body is not detected (whoever can do that can also edit the rows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from .dialect import statement_code
from .postgres_store import MIGRATION_LOCK, connect, describe_target, migrations
from .store import SchemaDamaged

_DOLLAR_TAG: Final = re.compile(r"\$[A-Za-z_]*\$")
_CREATE_TRIGGER: Final = re.compile(
    r"CREATE\s+TRIGGER\s+([A-Za-z_][A-Za-z0-9_]*)\s.*?\sON\s+([A-Za-z_][A-Za-z0-9_]*)\s.*?"
    r"EXECUTE\s+(?:FUNCTION|PROCEDURE)\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(",
    re.IGNORECASE | re.DOTALL,
)
_DROP_TRIGGER: Final = re.compile(r"DROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?([A-Za-z_][A-Za-z0-9_]*)\s+ON\s", re.IGNORECASE)
_CREATE_FUNCTION: Final = re.compile(
    r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(", re.IGNORECASE
)


def statements(script: str) -> list[str]:
    """Split a migration into statements at the semicolons outside quotes, dollar-quoted bodies
    and comments (PL/pgSQL bodies are full of semicolons)."""
    found: list[str] = []
    start = at = 0
    while at < len(script):
        char = script[at]
        if script.startswith("--", at):
            end = script.find("\n", at)
            at = len(script) if end < 0 else end + 1
        elif char == "'":
            end = at + 1
            while True:
                end = script.find("'", end)
                if end < 0 or not script.startswith("''", end):
                    break
                end += 2
            at = len(script) if end < 0 else end + 1
        elif char == "$" and (tag := _DOLLAR_TAG.match(script, at)):
            end = script.find(tag[0], tag.end())
            at = len(script) if end < 0 else end + len(tag[0])
        elif char == ";":
            found.append(script[start:at + 1].strip())
            start = at = at + 1
        else:
            at += 1
    if script[start:].strip():
        found.append(script[start:].strip())
    return found


@dataclass(frozen=True)
class Trigger:
    name: str
    table: str
    function: str
    statement: str


@dataclass(frozen=True)
class Definitions:
    """What the migrations leave in place: triggers by name, and each trigger function's last
    definition (as ``CREATE OR REPLACE``, so a repair never fails on one that survived)."""

    triggers: dict[str, Trigger]
    functions: dict[str, str]


def defined() -> Definitions:
    triggers: dict[str, Trigger] = {}
    functions: dict[str, str] = {}
    for _, script in migrations():
        for statement in statements(script):
            code = statement_code(statement)
            if created := _CREATE_TRIGGER.match(code):
                name, table, function = created[1], created[2], created[3]
                triggers[name] = Trigger(name, table, function, code)
            elif dropped := _DROP_TRIGGER.match(code):
                triggers.pop(dropped[1], None)
            elif function_def := _CREATE_FUNCTION.match(code):
                functions[function_def[1]] = re.sub(
                    r"^CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION", "CREATE OR REPLACE FUNCTION", code, count=1, flags=re.IGNORECASE
                )
    return Definitions(triggers, functions)


#: ``pg_trigger.tgenabled`` values that fire in a board's sessions (``session_replication_role =
#: origin``): 'O' (the default) and 'A' (always). 'D' never fires; 'R' fires only under the replica
#: role, which is what replication tooling leaves behind (``ENABLE REPLICA TRIGGER``).
FIRING: Final = frozenset({"O", "A"})


class RulesSilenced(SchemaDamaged):
    """The board's sessions run with ``session_replication_role`` other than ``origin`` (set on
    the database or the role): no ordinary trigger fires in them, whatever the schema holds."""

    def __init__(self, where: str, role: str) -> None:
        self.missing, self.disabled = [], []
        RuntimeError.__init__(
            self,
            f"{where} gives this board's sessions session_replication_role = {role}, in which none of the "
            "schema's triggers fire, so its rules are not enforced; reset it (ALTER DATABASE … RESET "
            "session_replication_role, or ALTER ROLE … RESET) and start again",
        )


@dataclass(frozen=True)
class Problems:
    missing: list[str]
    disabled: list[str]

    def __bool__(self) -> bool:
        return bool(self.missing or self.disabled)


def problems(conn: Any, wanted: Definitions) -> Problems:
    """The defined triggers absent from this database's schema, and those present but disabled."""
    present: dict[tuple[str, str], str] = {
        (str(table), str(name)): str(enabled)
        for table, name, enabled in conn.execute(
            "SELECT c.relname, t.tgname, t.tgenabled FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
            " WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace"
        )
    }
    missing, disabled = [], []
    for trigger in wanted.triggers.values():
        state = present.get((trigger.table, trigger.name))
        if state is None:
            missing.append(trigger.name)
        elif state not in FIRING:
            disabled.append(trigger.name)
    return Problems(sorted(missing), sorted(disabled))


def verify_triggers(url: str, *, repair: bool = False) -> list[str]:
    """Check every trigger the migrations define; returns the names it recreated or re-enabled.

    Raises :class:`SchemaDamaged` naming the missing and disabled ones, unless ``repair`` puts them
    back (functions first, from the migration SQL), in one transaction.
    """
    wanted = defined()
    with connect(url) as conn:
        role = conn.execute("SELECT current_setting('session_replication_role')").fetchone()
        if role is not None and str(role[0]) != "origin":
            raise RulesSilenced(f"the database at {describe_target(url)}", str(role[0]))
        found = problems(conn, wanted)
        if not found:
            return []
        if not repair:
            raise SchemaDamaged(f"the database at {describe_target(url)}", found.missing, found.disabled)
        with conn.transaction():
            # Under the migrations' lock, and checked again there: two boards repairing at once
            # put each rule back once.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            found = problems(conn, wanted)
            for name in found.missing:
                trigger = wanted.triggers[name]
                exists = conn.execute("SELECT to_regproc(%s) IS NOT NULL", (trigger.function,)).fetchone()
                if not (exists and exists[0]):
                    conn.execute(wanted.functions[trigger.function].encode())
                conn.execute(trigger.statement.encode())
            for name in found.disabled:
                trigger = wanted.triggers[name]
                conn.execute(f'ALTER TABLE "{trigger.table}" ENABLE TRIGGER "{trigger.name}"'.encode())
        return sorted(found.missing + found.disabled)
