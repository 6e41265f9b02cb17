"""Render the service units with this machine's paths (SPEC §13).

Two supervisors: systemd user units (``deploy/systemd/*.service``) and launchd agents
(``deploy/launchd/*.plist``), both package data of ``services.subscriber``. Templates hold
``{name}`` placeholders; values come from ``UnitValues``. Rendering quotes each value for where
it lands, so a path with a space or an ``--on-wake`` command with quotes, ``$`` or ``%`` reaches
the process exactly as given:

- systemd ``ExecStart=``: one word per value (a list value is several words), double-quoted with
  C escapes when needed, ``%`` → ``%%`` (specifiers) and ``$`` → ``$$`` (variable expansion);
- systemd ``Environment=``: the whole assignment is one word, quoted the same way (no ``$$``:
  nothing expands there);
- other systemd lines: ``%`` → ``%%``;
- launchd: the plist is parsed, placeholders are replaced in the parsed strings (a ``<string>``
  that is exactly a list placeholder becomes several array items), and the plist is written back
  by ``plistlib``, so XML escaping is plistlib's job.
"""

from __future__ import annotations

import os
import plistlib
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Final

#: The templates are package data (pyproject ``[tool.setuptools.package-data]``), read through
#: importlib.resources so an installed wheel renders the same units as a source checkout.
TEMPLATES: Final[Traversable] = resources.files("services.subscriber") / "deploy"

SYSTEMD: Final = "systemd"
LAUNCHD: Final = "launchd"
SUPERVISORS: Final = (SYSTEMD, LAUNCHD)

#: Logical unit → file name, per supervisor. The hub unit is optional (the hub starts on demand).
UNIT_FILES: Final[dict[str, dict[str, str]]] = {
    SYSTEMD: {
        "board": "taskloom-board.service",
        "subscriber": "taskloom-subscriber.service",
        "hub": "taskloom-hub.service",
    },
    LAUNCHD: {
        "board": "dev.taskloom.board.plist",
        "subscriber": "dev.taskloom.subscriber.plist",
        "hub": "dev.taskloom.hub.plist",
    },
}
EXECUTABLES: Final = ("taskd", "taskhub", "taskctl")

_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@+=:,./-]+")


class UnitError(Exception):
    """A unit cannot be rendered (a missing executable, a value a unit cannot hold)."""


@dataclass(frozen=True)
class UnitValues:
    """Everything the templates name, resolved to absolute paths on this machine."""

    taskd: str
    taskhub: str
    taskctl: str
    port: int
    board_url: str
    data_dir: str
    runtime_dir: str
    state_dir: str
    log_dir: str
    agents: tuple[str, ...]
    on_wake: str
    director: str | None = None
    #: ``--wake-on-timeout`` statuses, passed through to the subscriber.
    wake_on_timeout: tuple[str, ...] = ()
    path: str = "/usr/bin:/bin"
    #: The hub runs as its own unit: the subscriber waits for it instead of starting one.
    supervised_hub: bool = False

    def placeholders(self) -> dict[str, str | list[str]]:
        agent_args = [word for name in self.agents for word in ("--agent", name)]
        director_args = ["--director", self.director] if self.director else []
        timeout_args = [word for status in self.wake_on_timeout for word in ("--wake-on-timeout", status)]
        values: dict[str, str | list[str]] = {
            "taskd": self.taskd,
            "taskhub": self.taskhub,
            "taskctl": self.taskctl,
            "port": str(self.port),
            "board_url": self.board_url,
            "data_dir": self.data_dir,
            "runtime_dir": self.runtime_dir,
            "state_dir": self.state_dir,
            "log_dir": self.log_dir,
            "agents": ", ".join(self.agents),
            "agent_args": agent_args,
            "director_args": director_args,
            "timeout_args": timeout_args,
            "on_wake": self.on_wake,
            "path": self.path,
            "hub_unit": UNIT_FILES[SYSTEMD]["hub"] if self.supervised_hub else "",
            "hub_args": ["--no-start-hub"] if self.supervised_hub else [],
        }
        for name, value in values.items():
            for text in [value] if isinstance(value, str) else value:
                if "\n" in text or "\r" in text or "\0" in text:
                    raise UnitError(f"{name} must be one line, got {text!r}")
        return values


@dataclass(frozen=True)
class RenderedUnit:
    """One unit file: its logical role, file name and full text."""

    role: str
    name: str
    text: str


# -- this machine ------------------------------------------------------------------------------


def find_executables(bin_dir: Path | None = None) -> dict[str, str]:
    """``taskd``/``taskhub``/``taskctl`` beside this Python (the venv's bin), else on PATH."""
    here = bin_dir if bin_dir is not None else Path(sys.executable).parent
    found: dict[str, str] = {}
    for name in EXECUTABLES:
        candidate = here / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            found[name] = str(candidate.absolute())
            continue
        located = shutil.which(name)
        if located is None:
            raise UnitError(f"cannot find the {name} executable beside {sys.executable} or on PATH")
        found[name] = str(Path(located).absolute())
    return found


def unit_dir(supervisor: str, *, environ: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """Where the supervisor looks for a user's units."""
    env = os.environ if environ is None else environ
    home = home if home is not None else Path.home()
    if supervisor == SYSTEMD:
        config = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
        return config / "systemd" / "user"
    if supervisor == LAUNCHD:
        return home / "Library" / "LaunchAgents"
    raise UnitError(f"unknown supervisor {supervisor!r}; choose {' or '.join(SUPERVISORS)}")


def default_log_dir(supervisor: str, data_dir: Path, *, home: Path | None = None) -> Path:
    """systemd sends output to the journal; launchd agents write files, kept in ~/Library/Logs."""
    if supervisor == LAUNCHD:
        return (home if home is not None else Path.home()) / "Library" / "Logs" / "taskloom"
    return data_dir / "logs"


def roles(*, hub: bool) -> tuple[str, ...]:
    return ("board", "subscriber", "hub") if hub else ("board", "subscriber")


# -- rendering ----------------------------------------------------------------------------------


def render(
    supervisor: str, values: UnitValues, *, hub: bool = False, templates: Traversable = TEMPLATES
) -> list[RenderedUnit]:
    """Every unit for ``supervisor``, rendered with ``values``."""
    if supervisor not in SUPERVISORS:
        raise UnitError(f"unknown supervisor {supervisor!r}; choose {' or '.join(SUPERVISORS)}")
    placeholders = values.placeholders()
    rendered = []
    for role in roles(hub=hub):
        name = UNIT_FILES[supervisor][role]
        path = templates / supervisor / name
        try:
            template = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UnitError(f"cannot read the unit template {path}: {exc.strerror}") from None
        text = render_systemd(template, placeholders) if supervisor == SYSTEMD else render_launchd(template, placeholders)
        rendered.append(RenderedUnit(role, name, text))
    return rendered


def systemd_word(text: str, *, exec_line: bool) -> str:
    """One systemd word: bare when safe, else double-quoted with C escapes; specifiers escaped."""
    if text and _PLAIN_WORD.fullmatch(text):
        word = text
    else:
        word = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    word = word.replace("%", "%%")
    return word.replace("$", "$$") if exec_line else word


def render_systemd(template: str, values: Mapping[str, str | list[str]]) -> str:
    lines = []
    for line in template.splitlines():
        if line.lstrip().startswith("#") or "{" not in line:
            lines.append(line)
            continue
        key, sep, rest = line.partition("=")
        key = key.strip()
        if sep and key.startswith("Exec"):
            lines.append(f"{key}={_exec_words(rest, values)}")
        elif sep and key == "Environment":
            assignment = _substitute(rest.strip(), values, lambda text: text)
            lines.append(f"Environment={systemd_word(assignment, exec_line=False)}")
        else:
            lines.append(_substitute(line, values, lambda text: text.replace("%", "%%")).rstrip())
    return "\n".join(lines) + "\n"


def _exec_words(rest: str, values: Mapping[str, str | list[str]]) -> str:
    words: list[str] = []
    for token in rest.split():
        match = _PLACEHOLDER.fullmatch(token)
        if match:
            value = _value(values, match.group(1))
            words.extend(systemd_word(item, exec_line=True) for item in ([value] if isinstance(value, str) else value))
        elif "{" in token:
            words.append(systemd_word(_substitute(token, values, lambda text: text), exec_line=True))
        else:
            words.append(token)
    return " ".join(words)


def _substitute(text: str, values: Mapping[str, str | list[str]], escape: Callable[[str], str]) -> str:
    def one(match: re.Match[str]) -> str:
        value = _value(values, match.group(1))
        return escape(value if isinstance(value, str) else " ".join(value))

    return _PLACEHOLDER.sub(one, text)


def _value(values: Mapping[str, str | list[str]], name: str) -> str | list[str]:
    try:
        return values[name]
    except KeyError:
        raise UnitError(f"the template names an unknown placeholder {{{name}}}") from None


def render_launchd(template: str, values: Mapping[str, str | list[str]]) -> str:
    try:
        tree = plistlib.loads(template.encode("utf-8"))
    except Exception as exc:  # noqa: BLE001 - plistlib raises several kinds for a bad template
        raise UnitError(f"a launchd template is not a valid plist: {exc}") from None
    filled = _fill(tree, values)
    return plistlib.dumps(filled, fmt=plistlib.FMT_XML, sort_keys=False).decode("utf-8")


def _fill(node: Any, values: Mapping[str, str | list[str]]) -> Any:
    if isinstance(node, str):
        return _substitute(node, values, lambda text: text)
    if isinstance(node, dict):
        return {key: _fill(value, values) for key, value in node.items()}
    if isinstance(node, list):
        items: list[Any] = []
        for item in node:
            match = _PLACEHOLDER.fullmatch(item) if isinstance(item, str) else None
            value = _value(values, match.group(1)) if match else None
            if isinstance(value, list):
                items.extend(value)  # a list placeholder alone in a <string> becomes array items
            else:
                items.append(_fill(item, values))
        return items
    return node


# -- reading a rendered unit back (for checks and tests) ------------------------------------------


def systemd_exec_argv(text: str, key: str = "ExecStart") -> list[str]:
    """The argv systemd would run for ``key`` in a rendered unit (quotes and escapes undone)."""
    for line in text.splitlines():
        name, sep, rest = line.partition("=")
        if sep and name.strip() == key:
            return _split_systemd(rest)
    raise UnitError(f"no {key}= line")


def _split_systemd(text: str) -> list[str]:
    words: list[str] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        word: list[str] = []
        quote: str | None = None
        while i < n and (quote is not None or not text[i].isspace()):
            char = text[i]
            if quote is None and char in "\"'":
                quote = char
            elif quote is not None and char == quote:
                quote = None
            elif char == "\\" and i + 1 < n:
                i += 1
                word.append({"n": "\n", "t": "\t"}.get(text[i], text[i]))
            elif char in "%$" and i + 1 < n and text[i + 1] == char:
                i += 1
                word.append(char)
            else:
                word.append(char)
            i += 1
        words.append("".join(word))
    return words


def launchd_program_arguments(text: str) -> list[str]:
    tree = plistlib.loads(text.encode("utf-8"))
    arguments = tree.get("ProgramArguments")
    if not isinstance(arguments, list) or not all(isinstance(item, str) for item in arguments):
        raise UnitError("ProgramArguments is not a list of strings")
    return list(arguments)


def program_argv(supervisor: str, text: str) -> list[str]:
    """The command line a rendered unit starts."""
    return systemd_exec_argv(text) if supervisor == SYSTEMD else launchd_program_arguments(text)


def split_agents(values: Sequence[str]) -> tuple[str, ...]:
    """``--agent a --agent b`` and ``--agent a,b`` both name two agents; order kept, no repeats."""
    names = [name.strip() for value in values for name in value.split(",")]
    return tuple(dict.fromkeys(name for name in names if name))
