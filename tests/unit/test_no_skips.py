"""No test in the suite can pass by skipping: no skip markers in the source, and a skip at run
time fails the run (tests/support/no_skips.py)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

TESTS: Final = Path(__file__).resolve().parents[1]
ROOT: Final = TESTS.parent
#: pytest.<name>(...) calls and pytest.mark.<name> markers that let a test not run.
SKIP_CALLS: Final = frozenset({"skip", "importorskip", "xfail"})
SKIP_MARKS: Final = frozenset({"skip", "skipif", "xfail"})
#: unittest's spellings of the same.
UNITTEST_SKIPS: Final = frozenset({"skipTest", "skipIf", "skipUnless", "expectedFailure"})


def skip_sites(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of every skip call, skip marker and unittest skip in a module."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id == "pytest" and node.attr in SKIP_CALLS:
            found.append((node.lineno, f"pytest.{node.attr}"))
        elif (isinstance(owner, ast.Attribute) and owner.attr == "mark" and isinstance(owner.value, ast.Name)
              and owner.value.id == "pytest" and node.attr in SKIP_MARKS):
            found.append((node.lineno, f"pytest.mark.{node.attr}"))
        elif node.attr in UNITTEST_SKIPS or (isinstance(owner, ast.Name) and owner.id == "unittest" and node.attr == "skip"):
            found.append((node.lineno, node.attr))
    return found


def test_no_test_module_can_skip() -> None:
    modules = sorted(TESTS.rglob("*.py"))
    assert len(modules) > 50, "the scan stopped seeing the suite"
    sites = [
        f"{path.relative_to(ROOT)}:{line} {what}"
        for path in modules
        for line, what in skip_sites(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    ]
    assert sites == [], "make each a hard requirement that fails with the command that fixes it"


def test_the_scan_sees_every_spelling_of_skip() -> None:
    source = '''
import pytest, unittest
pytestmark = pytest.mark.skipif(True, reason="x")
jsonschema = pytest.importorskip("jsonschema")

@pytest.mark.skip
def test_a(): pytest.skip("no")

@pytest.mark.xfail
def test_b(): pytest.xfail("later")

class T(unittest.TestCase):
    @unittest.skip("x")
    def test_c(self): self.skipTest("y")

def test_fine(): assert "pytest.skip" != "skipped"
'''
    kinds = sorted(what for _, what in skip_sites(ast.parse(source)))
    assert kinds == sorted([
        "pytest.mark.skipif", "pytest.importorskip", "pytest.mark.skip", "pytest.skip",
        "pytest.mark.xfail", "pytest.xfail", "skip", "skipTest",
    ])


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist workers, as make test runs"])
def test_a_skip_at_run_time_fails_the_run(tmp_path: Path, workers: list[str]) -> None:
    """The hooks turn every way a test can avoid running into a failure with its reason, in the
    process that runs the test: under pytest-xdist that is a worker, whose reports the run counts."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    (tmp_path / "conftest.py").write_text(
        "from tests.support.no_skips import pytest_make_collect_report, pytest_runtest_makereport\n"
    )
    # Built by concatenation so that this module's own scan does not see them as skips.
    skip, mark = "pytest." + "skip", "pytest.mark."
    (tmp_path / "test_runtime.py").write_text(
        "import pytest\n"
        f"def test_skips():\n    {skip}('chromium is not installed')\n"
        f"@{mark}skipif(True, reason='no nc')\ndef test_marked():\n    pass\n"
        f"@{mark}xfail(reason='later')\ndef test_xfail():\n    assert False\n"
        f"@{mark}xfail(reason='later')\ndef test_xpass():\n    pass\n"
        "def test_runs():\n    pass\n"
    )
    (tmp_path / "test_module_level.py").write_text(
        "import pytest\nmissing = pytest.importorskip('no_such_module_anywhere')\ndef test_never():\n    pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "--continue-on-collection-errors",
         *workers, str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 1, done.stdout + done.stderr
    assert "skipped" not in summary and "xfail" not in summary and "xpass" not in summary, summary
    # A skipif fails in setup and an importorskip at import, which pytest counts as errors.
    assert "3 failed, 1 passed, 2 errors" in summary, summary
    assert "chromium is not installed" in done.stdout and "no nc" in done.stdout
    assert "no_such_module_anywhere" in done.stdout
