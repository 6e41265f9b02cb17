"""Whose socket a loopback connection reached: the uid column of the kernel's TCP tables.

Loopback TCP carries no peer credentials, and any local user may bind a port the board left
free for a moment (a restart on its fixed port). So before a board token goes on a new loopback
connection, the client asks the kernel who holds the far end: Linux lists every TCP socket of
this network namespace in ``/proc/net/tcp`` and ``/proc/net/tcp6`` with the uid that created it
(an accepted or still-queued connection carries its listener's uid). The far end's own row is
used, else the ``LISTEN`` row of that address and port; a uid other than ours is refused with
:class:`ForeignListener` (docs/security.md, *Who listens on the board's port*). Once per
connection: a kept-alive one is the socket that was checked.

Where the kernel keeps no such table (macOS), nothing is checked: a residual risk, written down
in docs/security.md. A non-loopback peer (a board on another host) is not checked either.

It lives in the hub package because the services share nothing but ``shared/``, which holds no
I/O, and ``taskctl`` may import the services' client modules. Standard library only: ``taskctl``
imports it on every request to the board.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Protocol

#: The kernel's TCP tables, one per address family (Linux, proc(5)).
TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
#: The ``st`` column of a listening socket (include/net/tcp_states.h: TCP_LISTEN = 10).
LISTEN = "0A"
#: Columns of a row: sl, local_address, rem_address, st, tx:rx queue, tr:when, retrnsmt, uid, ...
_LOCAL, _REMOTE, _STATE, _UID = 1, 2, 3, 7

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Connected(Protocol):
    """What is needed of a connected socket (a ``socket.socket``, uvloop's pseudo-socket)."""

    def getpeername(self) -> tuple[object, ...]: ...
    def getsockname(self) -> tuple[object, ...]: ...


class ForeignListener(Exception):
    """The far end of a loopback connection is not a socket of this user: send it no secret."""

    def __init__(self, host: str, port: int, uid: int | None) -> None:
        self.host, self.port, self.uid = host, port, uid
        if uid is None:
            why = "the kernel lists no socket of this user behind it"
        else:
            why = f"it belongs to uid {uid}, not to this user (uid {os.geteuid()})"
        super().__init__(f"the listener on {host}:{port} is not this user's: {why}")


def check_listener(sock: Connected | None) -> None:
    """Raise :class:`ForeignListener` unless ``sock``'s loopback peer is a socket of this uid.

    Call it after connecting and before the first byte of a request goes out.
    """
    if sock is None:
        raise ForeignListener("?", 0, None)
    peer_host, peer_port = _endpoint(sock.getpeername())
    if not peer_host.is_loopback:
        return  # a board on another host: what protects it is TLS, the operator's (docs/security.md)
    local = _endpoint(sock.getsockname())
    # The peer's own family first: its row is usually there, and each table costs a walk of the
    # kernel's whole socket hash (about a millisecond).
    order = TABLES if peer_host.version == 4 else TABLES[::-1]
    found: list[str] = []

    def tables() -> Iterator[str]:
        for path in order:
            if (text := _read(path)) is not None:
                found.append(path)
                yield text

    uid = holder_uid((peer_host, peer_port), local, tables())
    if uid is None and not found and not any(os.path.exists(path) for path in TABLES):
        return  # no such table on this system (macOS): the residual risk docs/security.md names
    if uid != os.geteuid():
        raise ForeignListener(str(peer_host), peer_port, uid)


def holder_uid(peer: tuple[Address, int], local: tuple[Address, int], tables: Iterable[str]) -> int | None:
    """The uid of the socket at ``peer`` that the connection from ``local`` reached, from the
    tables' text; None when no row names it.

    The far end's own row (local address ``peer``, remote ``local``) wins: it is the very
    socket that reads what we send. Without one (a SYN-cookie handshake the listener has not
    finished), the ``LISTEN`` row on ``peer``'s address, else a wildcard one on its port, as the
    kernel would pick.
    """
    port_field = f":{peer[1]:04X} "
    exact: list[int] = []
    wildcard: list[int] = []
    for text in tables:
        for line in text.splitlines()[1:]:
            if port_field not in line:
                continue  # most rows: a cheap substring test before any parsing
            fields = line.split()
            try:
                row_local, row_remote, uid = _field(fields[_LOCAL]), _field(fields[_REMOTE]), int(fields[_UID])
            except (IndexError, ValueError):
                continue
            if row_local[1] != peer[1]:
                continue
            if row_local[0] == peer[0] and row_remote == local:
                return uid
            if fields[_STATE] == LISTEN and row_local[0] == peer[0]:
                exact.append(uid)
            elif fields[_STATE] == LISTEN and row_local[0].is_unspecified:
                wildcard.append(uid)
    candidates = exact or wildcard
    if not candidates:
        return None
    # Several listeners (SO_REUSEPORT, one per family): any uid not ours decides.
    return next((uid for uid in candidates if uid != os.geteuid()), candidates[0])


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as table:
            return table.read()
    except OSError:
        return None


def _endpoint(name: tuple[object, ...]) -> tuple[Address, int]:
    """``getpeername()``'s host and port; an IPv4-mapped IPv6 address as the IPv4 one."""
    return _plain(ipaddress.ip_address(str(name[0]).partition("%")[0])), int(str(name[1]))


def _field(text: str) -> tuple[Address, int]:
    """A table's ``ADDR:PORT``: the address as 32-bit words in host byte order, the port in hex."""
    host, _, port = text.partition(":")
    raw = b"".join(int(host[i:i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(host), 8))
    return _plain(ipaddress.ip_address(raw)), int(port, 16)


def _plain(address: Address) -> Address:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address

