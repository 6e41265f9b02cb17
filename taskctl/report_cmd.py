"""``taskctl report``: write and list delivery reports, and print the template (SPEC §4.4)."""

from __future__ import annotations

from typing import Any

import click

from shared import limits

from .command import REF, command, current, drop_none, text_or_file
from .http import segment
from .output import Column
from .render import short_time, who

REPORT_COLUMNS = [
    Column("ID", lambda r: r.get("id")),
    Column("ROUND", lambda r: r.get("round")),
    Column("WHEN", lambda r: short_time(r.get("created_at"))),
    Column("ACTOR", lambda r: who(r.get("actor_kind"), r.get("actor_id"))),
    Column("FIRST LINE", lambda r: _first_line(r.get("body") or ""), elastic=True),
]


def _first_line(body: str) -> str:
    lines = [line.strip() for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return lines[0] if lines else ""


@click.group()
def report() -> None:
    """Write and list delivery reports; print the template a delivery accepts."""


@command(report, "template")
def template() -> None:
    """Print the report skeleton: fill in every <replace: …> and pass it to `task deliver --report-file`."""
    from services.board import report_format  # pure module; imported only when asked

    inv = current()
    data = {
        "markdown": report_format.TEMPLATE,
        "required_sections": list(report_format.REQUIRED_SECTIONS),
        "optional_sections": list(report_format.OPTIONAL_SECTIONS),
        "max_bytes": report_format.MAX_REPORT_BYTES,
    }
    inv.out.result(data, lambda d: inv.out.echo(d["markdown"], nl=False))


@command(report, "write")
@click.argument("ref", type=REF)
@click.option("-f", "--file", "source", metavar="FILE|-", required=True, help="The report (markdown), or - for stdin.")
def write(ref: str, source: str) -> None:
    """Write a report for the current delivery round without delivering."""
    inv = current()
    written = inv.call("POST", f"/tasks/{segment(ref)}/report", {"body": text_or_file(None, source, "report")})
    inv.out.result(written, lambda r: inv.out.echo(f"wrote report {r['id']} for {ref} round {r['round']}"))


@command(report, "list")
@click.argument("ref", type=REF)
@click.option("--round", "round_", type=click.IntRange(min=1), help="Only this delivery round.")
@click.option("--full", is_flag=True, help="Print each report whole instead of a table.")
def list_(ref: str, round_: int | None, full: bool) -> None:
    """List a task's reports, oldest first."""
    inv = current()
    query = drop_none({"round": round_, "limit": limits.PAGE_LIMIT_MAX})
    page: dict[str, Any] = inv.call("GET", f"/tasks/{segment(ref)}/reports", query=query)

    def human(page: dict[str, Any]) -> None:
        if not full:
            inv.out.table(page["items"], REPORT_COLUMNS, empty="no reports")
            return
        for item in page["items"]:
            inv.out.echo(inv.out.style(f"# report {item['id']} (round {item['round']}, "
                                       f"{who(item['actor_kind'], item['actor_id'])}, {short_time(item['created_at'])})",
                                       bold=True))
            inv.out.echo(item["body"].rstrip())
            inv.out.echo()

    inv.out.result(page, human)
