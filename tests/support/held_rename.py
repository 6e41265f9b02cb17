"""Hold a real process just before its Nth rename (or hard link) inside a directory, so a test can
SIGKILL it at that exact point of a multi-step file operation (a restore, an import).

The process is the real executable, unchanged: a ``sitecustomize`` on its ``PYTHONPATH`` adds an
audit hook (``sys.addaudithook``) that, at the Nth ``os.rename``/``os.link`` event naming a path in
the directory, touches a marker file and never returns. The test waits for the marker (a
condition with a deadline), kills, and looks at what the process left behind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

HOOK = '''
import os, sys, threading
_nth = int(os.environ.get("TASKLOOM_TEST_HOLD_AT_RENAME", "0"))
if _nth:
    _inside = os.environ["TASKLOOM_TEST_HOLD_INSIDE"]
    _marker = os.environ["TASKLOOM_TEST_HOLD_MARKER"]
    _seen = [0]

    def _hold(event, args):
        if event not in ("os.rename", "os.link"):
            return
        if not any(os.path.abspath(os.fsdecode(path)).startswith(_inside + os.sep) for path in args[:2]):
            return
        _seen[0] += 1
        if _seen[0] == _nth:
            with open(_marker, "w") as handle:
                handle.write(f"{event} {os.fsdecode(args[0])} -> {os.fsdecode(args[1])}")
            threading.Event().wait()  # held here until the test kills the process

    sys.addaudithook(_hold)
'''


@dataclass(frozen=True)
class HeldRename:
    env: dict[str, str]
    marker: Path

    def reached(self) -> str | None:
        """The rename the process is held before, once it got there."""
        try:
            return self.marker.read_text() or None
        except FileNotFoundError:
            return None


def hold_before_rename(scratch: Path, inside: Path, nth: int) -> HeldRename:
    """The environment that holds a process before its ``nth`` rename or link of a path in ``inside``."""
    hook_dir = scratch / "hold-hook"
    hook_dir.mkdir(parents=True, exist_ok=True)
    (hook_dir / "sitecustomize.py").write_text(HOOK)
    marker = scratch / f"held-{nth}"
    marker.unlink(missing_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hook_dir), env.get("PYTHONPATH", "")]))
    env["TASKLOOM_TEST_HOLD_AT_RENAME"] = str(nth)
    env["TASKLOOM_TEST_HOLD_INSIDE"] = str(inside.absolute())
    env["TASKLOOM_TEST_HOLD_MARKER"] = str(marker)
    return HeldRename(env, marker)
