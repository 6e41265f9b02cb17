"""One declarative table of knobs per process: name, default, environment variable, flag, help,
validation — written once, read by the command line and by the settings object.

A knob that feeds a settings field is declared *on* the field (``port: int = knob(7431, …)``), so
the dataclass default is the only default; a knob only the command line uses is a ``Knob`` row
of its own. ``options(table)`` turns a table into click options, ``settings_values`` picks a
settings object's fields out of the parsed parameters. Environment variables are spelled out in
full and come from the table only (no ``auto_envvar_prefix``): each process has its own prefix
(``TASKLOOM_BOARD_``, ``TASKLOOM_HUB_``, ``TASKLOOM_LOOP_``) besides the few variables every
process reads with one meaning (``SHARED_ENV``), so a hub spawned with a caller's environment
cannot take the board's port. Pure: no I/O, click is only how the table is read from argv.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

import click

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

#: The metadata key a settings field carries its knob under.
METADATA_KEY: Final = "taskloom.knob"
#: Variables several processes read, each with one meaning everywhere (README, docs/operations.md).
#: ``TASKLOOM_DATABASE_URL`` names the board's PostgreSQL database: one meaning for every board
#: process on it (and for any tool that reads the board's state directly).
SHARED_ENV: Final = frozenset({
    "TASKLOOM_DATA_DIR", "TASKLOOM_RUNTIME_DIR", "TASKLOOM_URL", "TASKLOOM_TOKEN", "TASKLOOM_DATABASE_URL",
})


class Seconds(click.FloatRange):
    """A time knob: a range of seconds that also refuses ``nan`` and ``inf`` (in any spelling).

    A NaN compares false with every bound, so a plain ``FloatRange`` lets it through, to fail
    later in ``call_later`` or to make a deadline that never comes; every time option of every
    process uses this type instead.
    """

    name = "seconds"

    def __init__(self, *args: Any, unit: str = "seconds", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unit = unit

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a number of {self.unit}", param, ctx)
        return number


@dataclasses.dataclass(frozen=True)
class Knob:
    """One row of a process's table."""

    name: str
    default: Any
    #: The environment variable, in full; None: the command line only (an action or a handle
    #: that means nothing outside the invocation that got it).
    env: str | None
    help: str
    #: ``--name`` unless given; ``--on/--off`` pairs spell both.
    flag: str | None = None
    short: str | None = None
    type: Any = None
    hidden: bool = False
    multiple: bool = False
    is_flag: bool = False
    flag_value: Any = None
    required: bool = False
    metavar: str | None = None
    callback: Callable[[click.Context, click.Parameter, Any], Any] | None = None
    #: How the docs show a default that is computed at start (``platform default``); else the value.
    default_text: str | None = None

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def flags(self) -> tuple[str, ...]:
        """Every spelling on the command line (``--log-stderr``, ``--no-log-stderr``, ``-v``)."""
        spelled = tuple(part for part in self.option.split("/") if part)
        return ((self.short,) if self.short else ()) + spelled

    def shown_default(self) -> str:
        """The default as the docs write it."""
        if self.default_text is not None:
            return self.default_text
        if self.required:
            return "required"
        value = self.default
        if self.is_flag:  # off: the flag is not given
            return "on" if value == (True if self.flag_value is None else self.flag_value) else "off"
        if isinstance(value, bool):
            return "on" if value else "off"
        if value is None or value == ():
            return "none"
        if isinstance(value, float):
            return f"{value:g}"
        return str(value)

    def parse(self, text: str) -> Any:
        """A value from its environment variable's text, validated as the command line does."""
        kind = click.types.convert_type(self.type, self.default)
        return kind.convert(text, None, None)


def knob(default: T, *, env: str | None, help: str, **row: Any) -> T:
    """A settings field that is also a knob; ``default`` is the one default it has."""
    meta = Knob(name="", default=default, env=env, help=help, **row)
    return dataclasses.field(default=default, metadata={METADATA_KEY: meta})


def required_knob(*, env: str | None, help: str, **row: Any) -> Any:
    """A settings field without a default that the command line requires."""
    meta = Knob(name="", default=None, env=env, help=help, required=True, **row)
    return dataclasses.field(metadata={METADATA_KEY: meta})


def field_knobs(settings: type) -> tuple[Knob, ...]:
    """The knobs declared on a settings dataclass's fields, named after them, in field order."""
    return tuple(
        dataclasses.replace(field.metadata[METADATA_KEY], name=field.name)
        for field in dataclasses.fields(settings)
        if METADATA_KEY in field.metadata
    )


def table(*parts: Knob | type) -> tuple[Knob, ...]:
    """A process's table: settings classes (their field knobs) and single rows, in help order."""
    rows: list[Knob] = []
    for part in parts:
        rows.extend((part,) if isinstance(part, Knob) else field_knobs(part))
    names = [row.name for row in rows]
    if len(set(names)) != len(names):
        raise ValueError(f"a knob is declared twice: {names}")
    return tuple(rows)


def click_option(row: Knob) -> Callable[[F], F]:
    extra: dict[str, Any] = {}
    if row.is_flag:
        extra["is_flag"] = True
        if row.flag_value is not None:
            extra["flag_value"] = row.flag_value
    if row.type is not None:
        extra["type"] = row.type
    # click (8.2 on) tells an explicit ``default=None`` from none given: a required option with
    # one counts as given. Only an on/off pair keeps None, its "decide at start" third state.
    if row.default is not None or "/" in row.option:
        extra["default"] = row.default
    declared = [*((row.short,) if row.short else ()), row.option, row.name]
    shown = not row.is_flag and row.default not in (None, ())
    return click.option(
        *declared,
        envvar=row.env,
        show_envvar=row.env is not None,
        show_default=row.default_text or shown,
        help=row.help,
        hidden=row.hidden,
        multiple=row.multiple,
        required=row.required,
        metavar=row.metavar,
        callback=row.callback,
        **extra,
    )


def options(rows: Iterable[Knob]) -> Callable[[F], F]:
    """Decorate a click command with one option per row, in the table's order."""
    ordered = list(rows)

    def apply(function: F) -> F:
        for row in reversed(ordered):
            function = click_option(row)(function)
        return function

    return apply


def settings_values(settings: type, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parsed parameters that are fields of ``settings`` (its knobs), by field name."""
    return {row.name: params[row.name] for row in field_knobs(settings) if row.name in params}


def by_name(rows: Iterable[Knob]) -> dict[str, Knob]:
    return {row.name: row for row in rows}
