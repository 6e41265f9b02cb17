"""``taskctl mcp``: the board's agent verbs as Model Context Protocol tools over stdio.

An agent harness launches ``taskctl mcp`` and speaks MCP (JSON-RPC) on its stdin/stdout. Each tool
is one HTTP request to the board through taskctl's own discovery and client, so a tool answers
exactly what ``taskctl`` or ``curl`` would: the board's JSON on success, the board's
``{code, message, details, hint}`` as a tool error (``isError: true``) on refusal. Refusals are
tool results, not JSON-RPC errors, so the model reads them and can act on the hint.

The actor is the server's: ``--actor``/``--actor-kind`` or ``TASKLOOM_ACTOR``/``TASKLOOM_ACTOR_KIND``
as the harness configured them. No tool has an actor argument, and an argument a tool does not
declare is refused, so nothing the model writes can change who acts. Both must be given: the
fallback taskctl uses at a shell (the user name as ``human``) would let a model pass for a person,
whose comments resume awaiting cards and whose confirmations approve reviews.

The SDK (``mcp``, which brings pydantic and starlette) is an optional dependency
(``taskloom[mcp]``, docs/dependencies.md); it is imported only when the server starts.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import click

from shared import domain, limits

from .actors import Actor
from .command import API, current, global_options
from .discovery import Board, current_token, resolve_board
from .errors import TaskctlError, internal_error, redact, redact_json
from .http import BoardHttp, segment

SERVER_NAME = "taskloom"
SDK_MISSING = "taskctl mcp needs the MCP Python SDK, which is not installed: pip install 'taskloom[mcp]'"
#: How many ready tasks ``ready`` returns when the model does not say.
READY_DEFAULT_LIMIT = 20

# -- the tool table (no SDK needed: tests and docs read it) -------------------------------------


@dataclass(frozen=True)
class Param:
    """One tool argument, declared as JSON Schema and checked before any request is sent."""

    name: str
    type: str  # JSON Schema type: "string" | "integer" | "boolean"
    description: str
    required: bool = False
    enum: tuple[str, ...] | None = None
    minimum: int | None = None
    maximum: int | None = None

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "description": self.description}
        if self.enum is not None:
            out["enum"] = list(self.enum)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    json: dict[str, Any] | None = None
    query: dict[str, Any] | None = None


@dataclass(frozen=True)
class Tool:
    """An MCP tool and the one board request it makes."""

    name: str
    description: str
    params: tuple[Param, ...]
    build: Callable[[Mapping[str, Any]], Request]
    #: The text the model reads on success; the full answer is always the structured content too.
    text: Callable[[Any], str] = field(default=lambda body: json.dumps(body, ensure_ascii=False))

    def input_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {param.name: param.schema() for param in self.params},
            "required": [param.name for param in self.params if param.required],
            "additionalProperties": False,
        }


#: The key under which the server (never the model) hands the builders its own actor id.
ACTOR_ID = "\0actor_id"


def _task(ref: str, verb: str = "") -> str:
    return f"{API}/tasks/{segment(ref)}" + (f"/{verb}" if verb else "")


def _pick(args: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {name: args[name] for name in names if args.get(name) is not None}


REF = Param("ref", "string", "The task: its identifier (DEMO-0001), its uuid, or a unique uuid prefix.", required=True)
IF_VERSION = Param("if_version", "integer", "Refuse with VERSION_CONFLICT unless the task is at this version.", minimum=1)

TOOLS: tuple[Tool, ...] = (
    Tool(
        "ready",
        "Tasks you can claim now, most urgent first (GET /api/v1/tasks?ready=true&for=<this server's actor>):"
        " todo, not an epic, nothing open blocking them, unassigned or assigned to you.",
        (
            Param("project", "string", "Only this project's tasks."),
            Param("limit", "integer", f"At most this many (default {READY_DEFAULT_LIMIT}).", minimum=1,
                  maximum=limits.PAGE_LIMIT_MAX),
        ),
        lambda a: Request("GET", f"{API}/tasks", query={
            "ready": True, "for": a[ACTOR_ID], "project": a.get("project"), "limit": a.get("limit", READY_DEFAULT_LIMIT),
        }),
    ),
    Tool(
        "show",
        "The card brief of a task as markdown (POST /api/v1/export): state, description, acceptance, comments,"
        " relations, reports, sessions and its history. Read it before working a card and when resuming one.",
        (REF,),
        lambda a: Request("POST", f"{API}/export", json={"ref": a["ref"]}),
        text=lambda body: str(body["markdown"]),
    ),
    Tool(
        "claim",
        "Claim a task (todo → in_progress) as this server's actor, or re-claim one you hold.",
        (
            REF,
            Param("steal", "boolean", "Take a task assigned to someone else (needs reason)."),
            Param("reason", "string", "Why; at least 8 characters when stealing."),
            IF_VERSION,
        ),
        lambda a: Request("POST", _task(a["ref"], "claim"), json=_pick(a, "steal", "reason", "if_version")),
    ),
    Tool(
        "heartbeat",
        "Tell the board you are still working a task you hold (keeps the claim fresh).",
        (REF,),
        lambda a: Request("POST", _task(a["ref"], "heartbeat"), json={}),
    ),
    Tool(
        "ask",
        "Ask a human a question about a task you hold: a question comment, and the task waits in awaiting"
        " until a human answers.",
        (REF, Param("question", "string", "The question, markdown.", required=True), IF_VERSION),
        lambda a: Request("POST", _task(a["ref"], "ask"), json={"body": a["question"], **_pick(a, "if_version")}),
    ),
    Tool(
        "comment",
        "Comment on a task.",
        (
            REF,
            Param("body", "string", "The comment, markdown.", required=True),
            Param("kind", "string", "The comment's kind (default note).", enum=tuple(domain.COMMENT_KINDS)),
        ),
        lambda a: Request("POST", _task(a["ref"], "comments"), json=_pick(a, "body", "kind")),
    ),
    Tool(
        "report",
        "Write the delivery report for the task's current round (markdown; sections Summary, Changes,"
        " Verification — the board says what is missing).",
        (REF, Param("body", "string", "The report, markdown.", required=True)),
        lambda a: Request("POST", _task(a["ref"], "report"), json={"body": a["body"]}),
    ),
    Tool(
        "deliver",
        "Deliver a task for review: a report for this round and in_progress → in_review, together. Give the"
        " report as body, or report_id, or neither to use this round's latest report.",
        (
            REF,
            Param("body", "string", "The delivery report, markdown."),
            Param("report_id", "string", "A report already written this round."),
            IF_VERSION,
        ),
        lambda a: Request("POST", _task(a["ref"], "deliver"), json=_pick(a, "body", "report_id", "if_version")),
    ),
    Tool(
        "move",
        "Move a task to another status (in_progress → todo releases it; in_review needs deliver).",
        (
            REF,
            Param("to", "string", "The status to move to.", required=True, enum=tuple(domain.STATUSES)),
            Param("reason", "string", "Why (stored as the awaiting or blocked reason)."),
            IF_VERSION,
        ),
        lambda a: Request("POST", _task(a["ref"], "move"), json=_pick(a, "to", "reason", "if_version")),
    ),
)
TOOLS_BY_NAME: dict[str, Tool] = {tool.name: tool for tool in TOOLS}

_JSON_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "boolean": (bool,)}


def check_arguments(tool: Tool, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """The arguments as declared, or a VALIDATION_FAILED refusal naming the offender (nothing is sent)."""
    args = dict(arguments or {})
    declared = {param.name: param for param in tool.params}
    unknown = sorted(set(args) - set(declared))
    if unknown:
        hint = None
        if {"actor", "actor_kind", "actor_id"} & set(unknown):
            hint = "the actor is this server's (TASKLOOM_ACTOR / TASKLOOM_ACTOR_KIND), never a tool argument"
        raise TaskctlError("VALIDATION_FAILED", f"{tool.name} takes no argument {', '.join(unknown)}",
                           details={"unknown": unknown}, hint=hint)
    for param in tool.params:
        if param.name not in args or args[param.name] is None:
            if param.required:
                raise TaskctlError("VALIDATION_FAILED", f"{tool.name} needs {param.name}", details={"field": param.name})
            args.pop(param.name, None)
            continue
        value = args[param.name]
        wrong_type = not isinstance(value, _JSON_TYPES[param.type]) or (param.type == "integer" and isinstance(value, bool))
        if wrong_type:
            raise TaskctlError("VALIDATION_FAILED", f"{param.name} must be a {param.type}", details={"field": param.name})
        if param.enum is not None and value not in param.enum:
            raise TaskctlError("VALIDATION_FAILED", f"{param.name} must be one of {', '.join(param.enum)}",
                               details={"field": param.name, "value": value})
        if (param.minimum is not None and value < param.minimum) or (param.maximum is not None and value > param.maximum):
            raise TaskctlError("VALIDATION_FAILED", f"{param.name} is out of range", details={"field": param.name, "value": value})
    return args


def error_text(error: TaskctlError) -> str:
    """A refusal as the model reads it: ``CODE: message``, then the hint that fixes it."""
    text = f"{error.code}: {error.message}"
    return text + (f"\nhint: {error.hint}" if error.hint else "")


# -- the board side: blocking calls, run on a worker thread --------------------------------------


class BoardCalls:
    """One keep-alive client of the board, found on first use and again after the board moved."""

    def __init__(self, actor: Actor, *, url: str | None, token: str | None, token_path: Path | None = None) -> None:
        self.actor = actor
        self._url = url
        self._token = token
        #: ``--token-file FILE``: read again whenever the board is found again (after a rotation).
        self._token_path = token_path
        self._http: BoardHttp | None = None
        # The SDK may run tool calls concurrently; one connection serves one request at a time.
        self._lock = threading.Lock()

    def _client(self) -> BoardHttp:
        if self._http is None:
            board: Board = resolve_board(self._url, self._token, announce=_stderr, token_path=self._token_path)
            if board.token_source == "given_file":
                board = replace(board, token=current_token(board))
            self._http = BoardHttp(board, self.actor)
        return self._http

    def run(self, tool: Tool, arguments: Mapping[str, Any] | None) -> Any:
        """The board's answer to ``tool``; a refusal raises TaskctlError with the board's code and hint."""
        args = check_arguments(tool, arguments)
        # After the check, so no argument the model sends can carry it: ``ready`` is this actor's queue.
        request = tool.build({**args, ACTOR_ID: self.actor.id})
        with self._lock:
            for attempt in range(2):
                http = self._client()
                try:
                    return http.call(request.method, request.path, request.json, query=request.query)
                except TaskctlError as error:
                    if not self._lost_board(http, error) or attempt:
                        raise
        raise AssertionError("every attempt returns or raises")

    def _lost_board(self, http: BoardHttp, error: TaskctlError) -> bool:
        """Forget the board after ``error`` if it may have moved; True when the request may go
        again at once: nothing of it reached a board (a restarted board listens elsewhere), or the
        token was refused while this server reads it from a file, the board's or its --token-file
        (a rotation: a 401 wrote nothing)."""
        unreachable = error.code == "BOARD_UNREACHABLE"
        rotated = error.code == "UNAUTHORIZED" and (self._token is None or self._token_path is not None)
        if not (unreachable or rotated):
            return False
        http.close()
        self._http = None  # found again, with the token file read again, on the next call
        return rotated or (error.details or {}).get("sent") is False

    def close(self) -> None:
        if self._http is not None:
            self._http.close()


def _stderr(text: str) -> None:
    # stdout is the MCP channel: anything for people goes to stderr.
    print(redact(text), file=sys.stderr, flush=True)


def server_actor(actor: str | None, kind: str | None, environ: Mapping[str, str]) -> Actor:
    """The harness's actor: both its id and its kind, from the command line or the environment."""
    # Blank is missing: the board reads a blank actor header as none (the board's default person)
    # and a blank kind as ``human``, either of which would let the model write as a person.
    actor_id = (actor or environ.get("TASKLOOM_ACTOR") or "").strip()
    actor_kind = (kind or environ.get("TASKLOOM_ACTOR_KIND") or "").strip()
    if not actor_id or not actor_kind:
        missing = [name for name, value in (("TASKLOOM_ACTOR", actor_id), ("TASKLOOM_ACTOR_KIND", actor_kind)) if not value]
        raise TaskctlError(
            "ACTOR_REQUIRED",
            f"taskctl mcp acts as the agent its harness names: set {' and '.join(missing)} in the server's environment",
            details={"missing": missing},
            hint='e.g. "env": {"TASKLOOM_ACTOR": "worker-1", "TASKLOOM_ACTOR_KIND": "claude"} in the MCP config',
        )
    return Actor(actor_kind, actor_id)


# -- the MCP side ---------------------------------------------------------------------------------


def serve(calls: BoardCalls) -> None:
    """Run the MCP server on stdin/stdout until the client closes it."""
    import anyio
    import anyio.to_thread
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    from .mcp_wire import AnswerUnreadable

    listed = [
        types.Tool(name=tool.name, description=tool.description, input_schema=tool.input_schema()) for tool in TOOLS
    ]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    def refusal(error: TaskctlError) -> types.CallToolResult:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=error_text(error))],
            structured_content={"error": redact_json(error.body())},
            is_error=True,
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = TOOLS_BY_NAME.get(params.name)
        try:
            if tool is None:
                raise TaskctlError("NOT_FOUND", f"no tool {params.name!r}; the tools are {', '.join(TOOLS_BY_NAME)}")
            body = await anyio.to_thread.run_sync(calls.run, tool, params.arguments)
        except Exception as exc:  # noqa: BLE001 - whatever fails, the model reads a tool result, not a protocol error
            return refusal(exc if isinstance(exc, TaskctlError) else internal_error(exc))
        # The model reads both forms: neither shows a secret (a token pasted into a card).
        structured = redact_json(body if isinstance(body, dict) else {"result": body})
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=redact(tool.text(body)))], structured_content=structured
        )

    server: Server[Any] = Server(
        SERVER_NAME,
        version="0.1.0",
        instructions=(
            "Taskloom board tools. `ready` lists claimable work, `show` reads a card's brief, `claim` takes it,"
            " `heartbeat` keeps the claim fresh, `ask` waits for a human, `report`/`deliver` hand it in."
            " A refusal names the board's error code and a hint."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )

    def refusal_result(error: TaskctlError) -> dict[str, Any]:
        return refusal(error).model_dump(by_alias=True, exclude_none=True, mode="json")

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            # A line the SDK cannot read is answered, not dropped with its caller left waiting.
            answered = AnswerUnreadable(read_stream, write_stream, refusal_result)
            await server.run(answered, write_stream, server.create_initialization_options())

    try:
        anyio.run(main)
    finally:
        calls.close()


@click.command("mcp")
@global_options
def mcp_command() -> None:
    """Serve the board's agent tools over stdio (Model Context Protocol) for an agent harness.

    \b
    Tools: ready, show, claim, heartbeat, ask, comment, report, deliver, move.
    The actor is TASKLOOM_ACTOR / TASKLOOM_ACTOR_KIND (or --actor / --actor-kind), never the model.
    How to mount it: docs/agents.md.
    """
    inv = current()
    try:
        import mcp.server.lowlevel  # noqa: F401 - only to learn whether the SDK is installed
    except ImportError:
        raise TaskctlError("MCP_SDK_MISSING", SDK_MISSING) from None
    actor = server_actor(inv.actor, inv.actor_kind, os.environ)
    serve(BoardCalls(actor, url=inv.url, token=inv.token, token_path=inv.token_path))
