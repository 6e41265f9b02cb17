"""Raw HTTP/1.1 over a socket, for requests no well-behaved client library would send."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Any

#: How long a raw exchange may take before the test gives up on the board.
RAW_TIMEOUT = 10.0


@dataclass
class RawReply:
    raw: bytes
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def host_port(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rpartition(":")
    return host.strip("[]"), int(port)


def parse_reply(raw: bytes) -> RawReply:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return RawReply(raw, status, headers, body)


def exchange(url: str, request: bytes, *, timeout: float = RAW_TIMEOUT) -> RawReply:
    """Send ``request`` as is and read until the board closes the connection."""
    deadline = time.monotonic() + timeout
    with socket.create_connection(host_port(url), timeout=timeout) as sock:
        sock.sendall(request)
        chunks: list[bytes] = []
        while True:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    raw = b"".join(chunks)
    assert raw, "the board closed the connection without answering"
    return parse_reply(raw)


def get_once(url: str, path: str, headers: dict[str, str]) -> RawReply:
    """A well-formed ``GET`` with ``Connection: close``, written by hand."""
    host = url.removeprefix("http://")
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Connection: close", *(f"{k}: {v}" for k, v in headers.items())]
    return exchange(url, ("\r\n".join(lines) + "\r\n\r\n").encode())
