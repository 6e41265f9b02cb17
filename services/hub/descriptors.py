"""The hub's open-file limit: raised to the hard limit at ``taskhub serve`` (docs/operations.md).

Every local session costs a descriptor, and any local user may connect; the common default soft
limit (1024, macOS 256) is far under the hard one, so the hub raises it as the board does. The
board's module does the same with its reserve arithmetic on top; the services share only
``shared/`` and this is a few system calls, so the hub keeps its own.
"""

from __future__ import annotations

import sys
from typing import Final

try:
    import resource
except ImportError:  # Windows has no rlimits
    resource = None  # type: ignore[assignment]

#: macOS refuses a soft RLIMIT_NOFILE above OPEN_MAX (<sys/syslimits.h>) even with an unlimited hard limit.
MACOS_OPEN_MAX: Final = 10240


def raise_open_file_limit() -> tuple[int, int, int] | None:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit, never lower: (before, soft, hard)."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if sys.platform == "darwin" and (hard == resource.RLIM_INFINITY or hard > MACOS_OPEN_MAX):
        target = MACOS_OPEN_MAX
    if soft == resource.RLIM_INFINITY or (target != resource.RLIM_INFINITY and soft >= target):
        return soft, soft, hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft, soft, hard
    return soft, target, hard
