"""The board's file descriptors: raising ``RLIMIT_NOFILE`` at start, and how many are still free.

Every connection, stream and SQLite file costs one descriptor. The common default soft limit is
1024 (macOS: 256) although the hard limit is usually far higher, so the board raises its soft
limit to the hard one at start, as nginx's ``worker_rlimit_nofile`` and systemd's advice for
servers do (``LimitNOFILE=`` in the shipped units sets the hard limit). What is still free is
counted from the kernel's own list of the process's descriptors, so nothing has to be kept in
step by hand.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Final

try:
    import resource
except ImportError:  # Windows has no rlimits; nothing is raised or counted there
    resource = None  # type: ignore[assignment]

#: Where the kernel lists this process's open descriptors (Linux; macOS and the BSDs).
FD_DIRECTORIES: Final = ("/proc/self/fd", "/dev/fd")
#: The reserve is at most this share of the soft limit, so that a low limit still admits streams.
MAX_RESERVE_SHARE: Final = 4
#: macOS refuses a soft RLIMIT_NOFILE above OPEN_MAX (<sys/syslimits.h>) even with an unlimited hard limit.
MACOS_OPEN_MAX: Final = 10240


@dataclass(frozen=True)
class NofileLimit:
    """The soft limit before and after the raise, and the hard limit it was raised to."""

    before: int
    soft: int
    hard: int


#: An unlimited soft limit (RLIM_INFINITY): nothing to count against.
UNLIMITED: Final = -1 if resource is None else resource.RLIM_INFINITY


def _ceiling(hard: int) -> int:
    if sys.platform == "darwin" and (hard == resource.RLIM_INFINITY or hard > MACOS_OPEN_MAX):
        return MACOS_OPEN_MAX
    return hard


def raise_nofile_limit() -> NofileLimit | None:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (never lower it); the limits that hold."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _ceiling(hard)
    if target != resource.RLIM_INFINITY and (soft == resource.RLIM_INFINITY or soft >= target):
        return NofileLimit(before=soft, soft=soft, hard=hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return NofileLimit(before=soft, soft=soft, hard=hard)
    return NofileLimit(before=soft, soft=target, hard=hard)


def reserve_within(requested: int, *, soft: int) -> int:
    """The descriptor reserve a board with ``soft`` descriptors can afford: at most a quarter of them."""
    if soft == UNLIMITED:
        return requested
    return max(1, min(requested, soft // MAX_RESERVE_SHARE))


def soft_limit() -> int:
    return UNLIMITED if resource is None else resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def open_descriptors() -> int | None:
    """How many descriptors this process holds now; None where the kernel does not list them."""
    for directory in FD_DIRECTORIES:
        try:
            # listdir holds one descriptor of its own on the directory while it reads it.
            return len(os.listdir(directory)) - 1
        except OSError:
            continue
    return None


def free_descriptors() -> int | None:
    """Descriptors this process may still open before ``EMFILE``; None when that cannot be known."""
    limit = soft_limit()
    used = open_descriptors()
    if used is None or limit == UNLIMITED:
        return None
    return limit - used


def fewer_free_than(keep: int, *, known_open: int) -> bool:
    """Whether fewer than ``keep`` descriptors are free.

    The kernel's list is read only once ``known_open`` (the descriptors the caller holds itself:
    its connections or streams) reaches half of what the limit leaves above ``keep``: listing
    10,000 descriptors takes ~9 ms, and a board far from its limit should not pay that per
    connection. The board's other descriptors (its SQLite files, the loop, the logs) are a few
    dozen, far below that half.
    """
    limit = soft_limit()
    if limit == UNLIMITED or known_open * 2 < limit - keep:
        return False
    free = free_descriptors()
    return free is not None and free < keep
