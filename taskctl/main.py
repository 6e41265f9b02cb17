"""``taskctl``: the entry point. Subcommands load lazily, so ``--help`` imports almost nothing.

Exit codes: 0 ok, 1 failure (a board refusal, an unreachable board), 2 usage, 3 ``--check``
differences (``export md --check``). Errors name their code and, where the board gives one, the
command that fixes it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

import click

from .command import LAST, global_options
from .errors import TaskctlError, internal_error, redact
from .output import Output

#: name → (``module:attribute``, one-line help shown by ``taskctl --help`` without importing).
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "project": ("taskctl.project_cmd:project", "Create, list, show and update projects."),
    "task": ("taskctl.task_cmd:task", "Create, list, claim, move, ask about and deliver tasks."),
    "comment": ("taskctl.comment_cmd:comment", "Add and list comments on a task."),
    "relation": ("taskctl.relation_cmd:relation", "Link tasks: blocks, related, parent, review_of."),
    "report": ("taskctl.report_cmd:report", "Write and list delivery reports; print the template."),
    "acceptance": ("taskctl.acceptance_cmd:acceptance", "A task's acceptance items and mode."),
    "session": ("taskctl.session_cmd:session", "Agent sessions working a card."),
    "attachment": ("taskctl.attachment_cmd:attachment", "Upload, download, list and remove attachments."),
    "labels": ("taskctl.labels_cmd:labels", "List labels and archive unused ones."),
    "actors": ("taskctl.labels_cmd:actors", "List the assignees and reporters the board knows."),
    "activity": ("taskctl.activity_cmd:activity", "Read the activity log (filters, keyset cursor)."),
    "events": ("taskctl.events_cmd:events", "Watch the live event stream (tail, follow, hub)."),
    "export": ("taskctl.export_cmd:export", "Card briefs as markdown (md, watch); the card state (state)."),
    "loop": ("taskctl.loop_cmd:loop", "Wake an agent supervisor when work is actionable."),
    "token": ("taskctl.admin_cmd:token", "Rotate the board token."),
    "open": ("taskctl.admin_cmd:open_board", "Open the board in a browser with a one-time login link."),
    "board": ("taskctl.admin_cmd:board", "The board's identity and where it runs."),
    "import": ("taskctl.lifecycle_cmd:import_group", "Import a state export into a board without projects."),
    "conditions": ("taskctl.conditions_cmd:conditions", "What the board sees holding now (WIP, blockers, stale claims)."),
    "mcp": ("taskctl.mcp_server:mcp_command", "Serve the agent tools over stdio (Model Context Protocol)."),
}
#: Commands other modules add to a lazily loaded group: group → [(module, attribute names)].
EXTENSIONS: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "events": [("taskctl.follow_cmd", ("follow", "hub"))],
    "export": [("taskctl.lifecycle_cmd", ("state",))],
    "board": [("taskctl.lifecycle_cmd", ("backup", "compact", "settings"))],
    "task": [("taskctl.ready_cmd", ("ready",))],
}


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _find_command(module: Any, attribute: str) -> click.Command | None:
    found = getattr(module, attribute, None)
    if isinstance(found, click.Command):
        return found
    # Fall back to the command whose click name matches (e.g. a function named ``events_group``).
    for value in vars(module).values():
        if isinstance(value, click.Command) and value.name == attribute:
            return value
    return None


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when named (click's lazy-loading pattern)."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]] | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.lazy = dict(lazy or {})

    def _available(self, name: str) -> bool:
        target = self.lazy[name][0].partition(":")[0]
        if _module_exists(target):
            return True
        return any(_module_exists(module) for module, _ in EXTENSIONS.get(name, []))

    def list_commands(self, ctx: click.Context) -> list[str]:
        lazy = [name for name in self.lazy if self._available(name)]
        return sorted({*super().list_commands(ctx), *lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.commands:
            return self.commands[name]
        if name not in self.lazy or not self._available(name):
            return None
        command = self._load(name)
        if command is not None:
            self.commands[name] = command
        return command

    def _load(self, name: str) -> click.Command | None:
        target, _, attribute = self.lazy[name][0].partition(":")
        command: click.Command | None = None
        if _module_exists(target):
            command = _find_command(importlib.import_module(target), attribute)
        for module_name, attributes in EXTENSIONS.get(name, []):
            if not _module_exists(module_name):
                continue
            if command is None:
                command = click.Group(name, help=self.lazy[name][1])
            if not isinstance(command, click.Group):
                continue
            module = importlib.import_module(module_name)
            for extra in attributes:
                sub = _find_command(module, extra)
                if sub is not None and sub.name not in command.commands:
                    command.add_command(sub)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The listing uses the static one-liners, so ``--help`` imports no command module."""
        rows = []
        for name in self.list_commands(ctx):
            if name in self.lazy:
                rows.append((name, self.lazy[name][1]))
            else:
                command = self.commands[name]
                rows.append((name, command.get_short_help_str(limit=formatter.width)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    lazy=LAZY_COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option("0.1.0", "--version", prog_name="taskctl", message="%(prog)s %(version)s")
@global_options
def cli() -> None:
    """Drive a Taskloom board from a shell: for people and for scripts.

    \b
    The board is found by --url, TASKLOOM_URL, the running board's pointer, or started
    locally (not when TASKLOOM_NO_AUTOSTART=1). The token comes from --token-file FILE
    (--token - for stdin; never a token value in argv), TASKLOOM_TOKEN or the board's token
    file; the actor from --actor/--actor-kind, TASKLOOM_ACTOR/TASKLOOM_ACTOR_KIND, else your
    user name as a human.

    \b
    Exit codes: 0 ok, 1 failure, 2 usage, 3 differences found by --check.
    """


def _wants_json(argv: list[str]) -> bool:
    # Only an option asks for JSON: after ``--`` the text --json is a value (a comment's body).
    options = argv[:argv.index("--")] if "--" in argv else argv
    return bool(LAST and LAST[0].json) or "--json" in options


def usage_error(error: click.UsageError) -> TaskctlError:
    """A usage error as the ``--json`` envelope's error: code USAGE, click's message, where to read more."""
    command = error.ctx.command_path if error.ctx is not None else "taskctl"
    details = {"command": command}
    if error.ctx is not None:
        details["usage"] = error.ctx.get_usage()
    return TaskctlError("USAGE", error.format_message(), details=details, hint=f"see {command} --help")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = cli.main(args=args, prog_name="taskctl", standalone_mode=False)
    except TaskctlError as error:
        Output(json=_wants_json(args)).failure(error)
        return 1
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 1
    except click.UsageError as error:  # exit 2; with --json a script reads why on stdout, as for any failure
        if _wants_json(args):
            Output(json=True).failure(usage_error(error))
        else:
            error.show()
        return error.exit_code
    except click.ClickException as error:  # click's own message and exit code
        error.show()
        return error.exit_code
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except BrokenPipeError:
        # `taskctl task list | head`: the reader left. Point stdout at devnull so the flush at
        # exit does not raise again (the recipe in the signal module's documentation).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:  # noqa: BLE001 - a bug: say so without a secret, the trace only on request
        internal = internal_error(exc)
        if os.environ.get("TASKLOOM_DEBUG"):
            import traceback

            click.echo(redact(traceback.format_exc()), err=True)
        Output(json=_wants_json(args)).failure(internal)
        return 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
