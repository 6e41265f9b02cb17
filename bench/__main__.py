"""Run every bench module in turn and print their tables: ``python -m bench [NAME ...]``.

A bench module is ``bench/<name>_bench.py`` with a ``main() -> None`` that prints its own table
and the command that reproduces it. Names on the command line pick modules (``store``, ``http``).
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
import time
from pathlib import Path


def modules(selected: list[str]) -> list[str]:
    found = sorted(path.stem for path in Path(__file__).parent.glob("*_bench.py"))
    if not selected:
        return found
    wanted = [name if name.endswith("_bench") else f"{name}_bench" for name in selected]
    unknown = sorted(set(wanted) - set(found))
    if unknown:
        raise SystemExit(f"no such bench: {', '.join(unknown)} (have: {', '.join(found)})")
    return wanted


def main(argv: list[str]) -> int:
    names = modules(argv)
    print(f"# Taskloom bench: {platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}")
    failed = []
    for name in names:
        print(f"\n## {name}")
        started = time.monotonic()
        try:
            importlib.import_module(f"bench.{name}").main()
        except Exception as exc:  # noqa: BLE001 - one broken bench must not hide the others' numbers
            failed.append(name)
            print(f"{name} failed: {exc!r}")
        print(f"({name} took {time.monotonic() - started:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
