"""Static readers of our own source for the contract tests: activity appends, SQL writes, actor
kinds and error codes, found with ``ast`` rather than grep so comments and docstrings never count."""

from __future__ import annotations

import ast
import functools
import importlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from shared import events as shared_events

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = "services/board/commands"

#: Methods that run a statement: the store's Tx verbs and the sqlite3 connection/cursor ones.
EXECUTE_METHODS = frozenset({"execute", "executemany", "executescript", "one", "all"})
WRITE_WORDS = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER"})
#: Role words that must never be written as an actor kind (SPEC §4.1).
FORBIDDEN_KINDS = frozenset({"agent", "taskd"})


def relative(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def python_files(*folders: str) -> list[Path]:
    found: list[Path] = []
    for folder in folders:
        found.extend(sorted((ROOT / folder).rglob("*.py")))
    return [path for path in found if "__pycache__" not in path.parts]


@functools.cache
def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def parse_text(source: str) -> ast.Module:
    return ast.parse(source)


# -- where a node lives ---------------------------------------------------------------------------


def top_level_functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Module-level functions and the methods of module-level classes, by qualified name."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{node.name}.{item.name}", item


def calls_by_function(tree: ast.Module) -> Iterator[tuple[str, ast.AST, ast.Call]]:
    """Every call with the top-level function (a command) it sits in; ``<module>`` otherwise."""
    claimed: set[int] = set()
    for name, function in top_level_functions(tree):
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                claimed.add(id(node))
                yield name, function, node
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and id(node) not in claimed:
            yield "<module>", tree, node


def call_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


# -- activity appends -------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordCall:
    path: str
    function: str
    line: int
    event: str | None  # None: not statically a declared name
    source: str
    constructor: str | None  # the shared.events function building ``changes``, if it is one


def events_aliases(tree: ast.Module) -> tuple[set[str], dict[str, str]]:
    """Names bound to the ``shared.events`` module, and names imported from it."""
    modules: set[str] = set()
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "shared":
            for alias in node.names:
                if alias.name == "events":
                    modules.add(alias.asname or "events")
        elif isinstance(node, ast.ImportFrom) and node.module == "shared.events":
            for alias in node.names:
                names[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "shared.events" and alias.asname:
                    modules.add(alias.asname)
    return modules, names


def _events_attribute(node: ast.AST, modules: set[str], names: dict[str, str]) -> str | None:
    """The attribute of shared.events a node refers to (``events.TASK_MOVED`` → ``TASK_MOVED``)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
        return node.attr
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    return None


def is_record_call(call: ast.Call) -> bool:
    """``tx.record(...)`` or ``<something>.tx.record(...)``: an activity append through the seam."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "record"):
        return False
    receiver = func.value
    return (isinstance(receiver, ast.Name) and receiver.id == "tx") or (
        isinstance(receiver, ast.Attribute) and receiver.attr == "tx"
    )


def record_calls_in(tree: ast.Module, path: str) -> list[RecordCall]:
    modules, names = events_aliases(tree)
    found = []
    for function, _, call in calls_by_function(tree):
        if not is_record_call(call):
            continue
        event: str | None = None
        first = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "event"), None)
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            event = first.value
        elif first is not None:
            attribute = _events_attribute(first, modules, names)
            value = getattr(shared_events, attribute, None) if attribute else None
            event = value if isinstance(value, str) else None
        changes = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "changes"), None)
        constructor = None
        if isinstance(changes, ast.Call):
            constructor = _events_attribute(changes.func, modules, names)
        found.append(RecordCall(path, function, call.lineno, event, ast.unparse(first) if first else "", constructor))
    return found


def record_calls(folders: Iterable[str] = ("services",)) -> list[RecordCall]:
    found: list[RecordCall] = []
    for path in python_files(*folders):
        found.extend(record_calls_in(parse(path), relative(path)))
    return found


def writers_by_event(calls: Iterable[RecordCall]) -> dict[str, set[str]]:
    writers: dict[str, set[str]] = {}
    for call in calls:
        if call.event is not None:
            writers.setdefault(call.event, set()).add(call.path)
    return writers


# -- SQL statements -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SqlCall:
    path: str
    function: str
    line: int
    #: Every text the statement can have (one per binding of a variable); None when built at run
    #: time in a way this reader cannot follow.
    texts: tuple[str, ...] | None

    @property
    def writes(self) -> bool:
        return self.texts is not None and any(is_mutating(text) for text in self.texts)


_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)


def is_mutating(sql: str) -> bool:
    """Whether any statement in the text changes the database (connection PRAGMAs do not)."""
    return any(_statement_writes(part) for part in _COMMENT.sub(" ", sql).split(";"))


def _statement_writes(statement: str) -> bool:
    text = statement.strip().upper()
    first = text.split(None, 1)[0] if text else ""
    if first in WRITE_WORDS:
        return True
    if first == "WITH":
        return re.search(r"\b(INSERT|UPDATE|DELETE|REPLACE)\b", text) is not None
    if first == "PRAGMA":
        return re.match(r"PRAGMA\s+(\w+\.)?(USER_VERSION|APPLICATION_ID|JOURNAL_MODE)\s*=", text) is not None
    return False


def _assignments(statements: Iterable[ast.AST]) -> dict[str, list[ast.expr]]:
    bound: dict[str, list[ast.expr]] = {}
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        bound.setdefault(target.id, []).append(node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                bound.setdefault(node.target.id, []).append(node.value)
    return bound


#: Modules whose string constants commands pass as SQL, by the name commands import them as.
SQL_MODULES: dict[str, str] = {"rules": "services.board.conditions.rules"}


def static_texts(node: ast.AST, *scopes: dict[str, list[ast.expr]], depth: int = 0) -> tuple[str, ...] | None:
    """The texts a string expression can have, ``{}`` standing for interpolated parts."""
    if depth > 5:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, ast.JoinedStr):
        return ("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values),)  # type: ignore[misc]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = static_texts(node.left, *scopes, depth=depth + 1)
        right = static_texts(node.right, *scopes, depth=depth + 1)
        return None if left is None or right is None else tuple(a + b for a in left for b in right)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in SQL_MODULES:
        # A statement the one rule's module builds (``rules.WAITS_FOR_SQL``): read as it is built.
        value = getattr(importlib.import_module(SQL_MODULES[node.value.id]), node.attr, None)
        return (value,) if isinstance(value, str) else None
    if isinstance(node, ast.Name):
        for scope in scopes:
            if node.id in scope:
                texts: list[str] = []
                for value in scope[node.id]:
                    resolved = static_texts(value, *scopes, depth=depth + 1)
                    if resolved is None:
                        return None
                    texts.extend(resolved)
                return tuple(texts)
    return None


def sql_calls_in(tree: ast.Module, path: str) -> list[SqlCall]:
    module_scope = _assignments(n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign)))
    found = []
    for function, scope, call in calls_by_function(tree):
        if call_name(call) not in EXECUTE_METHODS or not isinstance(call.func, ast.Attribute) or not call.args:
            continue
        local_scope = _assignments([scope]) if scope is not tree else {}
        found.append(SqlCall(path, function, call.lineno, static_texts(call.args[0], local_scope, module_scope)))
    return found


def sql_calls(folders: Iterable[str]) -> list[SqlCall]:
    found: list[SqlCall] = []
    for path in python_files(*folders):
        found.extend(sql_calls_in(parse(path), relative(path)))
    return found


def functions_calling(tree: ast.Module, names: Iterable[str]) -> dict[str, set[str]]:
    """For each of ``names``, the top-level functions of this module that call it."""
    wanted = set(names)
    callers: dict[str, set[str]] = {}
    for function, _, call in calls_by_function(tree):
        name = call_name(call)
        if name in wanted:
            callers.setdefault(name, set()).add(function)
    return callers


def defined_functions(tree: ast.Module) -> set[str]:
    return {name for name, _ in top_level_functions(tree)}


# -- actor kinds --------------------------------------------------------------------------------


def _forbidden_constants(node: ast.AST) -> list[str]:
    """Forbidden kind literals an expression can evaluate to (its value leaves, not its tests)."""
    if isinstance(node, ast.Constant):
        return [node.value] if node.value in FORBIDDEN_KINDS else []
    if isinstance(node, ast.BoolOp):
        return [hit for value in node.values for hit in _forbidden_constants(value)]
    if isinstance(node, ast.IfExp):
        return _forbidden_constants(node.body) + _forbidden_constants(node.orelse)
    if isinstance(node, ast.Call):
        # env.get("TASKLOOM_ACTOR_KIND", "agent"), os.getenv(..., "agent"), str("agent")
        return [hit for arg in node.args[1:] for hit in _forbidden_constants(arg)]
    return []


def _is_kind_name(name: str | None) -> bool:
    return bool(name) and re.search(r"(^|_)kind$", name.lower()) is not None  # type: ignore[union-attr]


def _mentions_kind(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and "kind" in node.value.lower()


_SQL_KIND_LITERAL = re.compile(r"'(agent|taskd)'")


def kind_violations_in(tree: ast.Module, path: str) -> list[str]:
    """Places that write ``agent`` or ``taskd`` as an actor kind; the program name is left alone."""
    hits: list[str] = []

    def hit(node: ast.AST, what: str) -> None:
        hits.append(f"{path}:{getattr(node, 'lineno', '?')}: {what}: {ast.unparse(node)[:120]}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = call_name(node)
            # Actor("agent", ...) / Actor(kind="taskd", ...)
            if name == "Actor":
                first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "kind"), None)
                if first is not None and _forbidden_constants(first):
                    hit(node, "Actor kind")
            # f(actor_kind="agent"), click.option("--actor-kind", default="agent"), env.get("..._KIND", "agent")
            for keyword in node.keywords:
                if _is_kind_name(keyword.arg) and _forbidden_constants(keyword.value):
                    hit(node, f"{keyword.arg}= argument")
            if any(_mentions_kind(arg) for arg in node.args):
                others = [arg for arg in node.args if not _mentions_kind(arg)]
                others += [k.value for k in node.keywords if k.arg in ("default", "value", None)]
                if any(_forbidden_constants(other) for other in others):
                    hit(node, "kind option/variable default")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None:
                continue
            for target in targets:
                name = (
                    target.id if isinstance(target, ast.Name)
                    else target.attr if isinstance(target, ast.Attribute)
                    else target.slice.value if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant)
                    else None
                )
                named_kind = _is_kind_name(name) or (isinstance(name, str) and name.lower().endswith("-kind"))
                if named_kind and _forbidden_constants(node.value):
                    hit(node, "assigned as a kind")
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    if (_is_kind_name(key.value) or key.value.lower().endswith("-kind")) and _forbidden_constants(value):
                        hit(node, f"{key.value!r} entry")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            for arg, default in pairs:
                if _is_kind_name(arg.arg) and _forbidden_constants(default):
                    hit(node, f"default of {arg.arg}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if is_mutating(node.value) and _SQL_KIND_LITERAL.search(node.value) and "kind" in node.value.lower():
                hit(node, "SQL literal")
    return hits


#: Text files (scripts, units, the page's modules) that set a kind: header, env var or option.
TEXT_KIND_PATTERN = re.compile(
    r"""(?ix)
    (?:actor[-_]kind["']?\s*[:=]\s*["']?(?:agent|taskd)\b)     # ACTOR_KIND=agent, "X-Taskloom-Actor-Kind": "taskd"
    | (?:--actor-kind[=\s]+["']?(?:agent|taskd)\b)            # --actor-kind agent
    | (?:\bkind["']?\s*:\s*["'](?:agent|taskd)["'])            # {kind: "agent"}
    """
)


def text_kind_violations(text: str, path: str) -> list[str]:
    hits = []
    for number, line in enumerate(text.splitlines(), start=1):
        if TEXT_KIND_PATTERN.search(line):
            hits.append(f"{path}:{number}: {line.strip()[:120]}")
    return hits


# -- error codes --------------------------------------------------------------------------------


def code_forwarders(tree: ast.Module) -> dict[str, int]:
    """Helpers that pass one of their parameters as the code: ``def _refuse(code, ...)``."""
    forwarders: dict[str, int] = {}
    for name, function in top_level_functions(tree):
        parameters = [a.arg for a in function.args.posonlyargs + function.args.args]
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and call_name(node) == "TaskloomError" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Name) and first.id in parameters:
                    forwarders[name.rsplit(".", 1)[-1]] = parameters.index(first.id)
    return forwarders


def raised_codes_in(tree: ast.Module, path: str, forwarders: dict[str, int]) -> list[tuple[str, int, str]]:
    """(path, line, code) for every literal error code handed to TaskloomError or a forwarder."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = call_name(node)
        index = 0 if name == "TaskloomError" else forwarders.get(name or "")
        if index is None:
            continue
        candidate = node.args[index] if len(node.args) > index else next(
            (k.value for k in node.keywords if k.arg == "code"), None
        )
        if isinstance(candidate, ast.Constant) and isinstance(candidate.value, str):
            found.append((path, node.lineno, candidate.value))
    return found


def raised_codes(folders: Iterable[str]) -> list[tuple[str, int, str]]:
    paths = python_files(*folders)
    forwarders: dict[str, int] = {}
    for path in paths:
        forwarders.update(code_forwarders(parse(path)))
    found = []
    for path in paths:
        found.extend(raised_codes_in(parse(path), relative(path), forwarders))
    return found
