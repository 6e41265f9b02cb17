"""``--meta`` that is not a JSON object taskctl can send is a usage error (exit 2), not a crash.

``taskctl/command.py:json_object`` parsed ``--meta`` with the standard ``json`` module and caught
only ``ValueError``:

- a deeply nested value raised ``RecursionError``, which landed in ``main``'s catch-all: exit 1,
  ``INTERNAL: taskctl failed: RecursionError …`` (the "this is a bug" answer);
- ``NaN`` / ``Infinity`` were accepted by ``json.loads`` and written back by ``json.dumps`` as the
  same non-JSON words, so the board answered ``the request body is not valid JSON … column 49``
  about a body the user never wrote, with exit 1.

SPEC §10: exit 2 for usage errors, which is what ``--meta '[1, 2]'`` already gets.
"""

from __future__ import annotations

import pytest

from tests.cli.conftest import Taskctl, activity_count, new_project

CASES = {
    "nested 5000 deep": "{\"a\": " + "[" * 5000 + "]" * 5000 + "}",
    "NaN": '{"ratio": NaN}',
    "Infinity": '{"ratio": Infinity}',
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_unsendable_meta_is_a_usage_error(tc: Taskctl, case: str) -> None:
    project = new_project(tc, "meta")
    before = activity_count(tc.data_dir)

    run = tc("--json", "task", "create", "-p", project, "With odd meta", "--meta", CASES[case])

    assert run.code == 2, f"{case}: expected exit 2 (usage), got {run.code}: {run.stdout[:300]}{run.stderr[:300]}"
    assert run.json["error"]["code"] == "USAGE", run.stdout[:300]
    assert "--meta" in run.json["error"]["message"], run.stdout[:300]
    assert activity_count(tc.data_dir) == before, "nothing was written"
