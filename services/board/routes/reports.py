"""Report routes: the template, write, deliver, waive, and the list of a task's reports."""

from __future__ import annotations

from typing import Any

from .. import report_format
from ..api import LIST_QUERY, PREFIX, Call, Created, F, Route
from ..commands import reports
from ..queries.reports import list_reports
from .tasks import FORCE, IF_VERSION, reporting_rejections


async def template(call: Call) -> Any:
    return {
        "markdown": report_format.TEMPLATE,
        "required_sections": list(report_format.REQUIRED_SECTIONS),
        "optional_sections": list(report_format.OPTIONAL_SECTIONS),
        "max_bytes": report_format.MAX_REPORT_BYTES,
    }


async def list_(call: Call) -> Any:
    query = dict(call.query)
    if "round" in query:
        query["round_"] = query.pop("round")
    return await call.store.query(list_reports, call.path["ref"], **query)


async def write(call: Call) -> Any:
    return Created(await call.store.command(reports.write_report, call.actor, call.path["ref"], **call.body))


async def deliver(call: Call) -> Any:
    return await reporting_rejections(
        call, "in_review", call.store.command(reports.deliver_task, call.actor, call.path["ref"], **call.body)
    )


async def waive(call: Call) -> Any:
    return await reporting_rejections(
        call, "in_review", call.store.command(reports.waive_report, call.actor, call.path["ref"], **call.body)
    )


REPORT_BODY = F("str", description="markdown with ## Summary, ## Changes, ## Verification (≤ 256 KiB)")
TASK = f"{PREFIX}/tasks/{{ref}}"
ROUTES = [
    Route("GET", f"{PREFIX}/reports/template", template, "The delivery report template and its rules"),
    Route("GET", f"{TASK}/reports", list_, "List a task's reports, oldest first",
          query={**LIST_QUERY, "round": F("int", minimum=1, description="only this delivery round")}),
    Route("POST", f"{TASK}/report", write, "Write a report for the current delivery round (201)",
          body={"body": F("str", required=True, description=REPORT_BODY.description)}, success=(201,)),
    Route("POST", f"{TASK}/deliver", deliver,
          "Deliver: move to in_review with a current-round report (the body given, report_id, or the latest)",
          body={"body": REPORT_BODY, "report_id": F("str"), "force": FORCE,
                "reason": F("str", description="why force passes open blockers (with force)"), "if_version": IF_VERSION}),
    Route("POST", f"{TASK}/waive", waive, "Move to in_review without a report; the reason is stamped on the task",
          body={"reason": F("str", required=True, description="at least 8 characters"), "force": FORCE,
                "if_version": IF_VERSION}),
]
