"""A stand-in for a hub of another protocol generation, run as its own process by the tests.

An older generation's code does not exist in this tree, so this script plays it: it takes the
owner lock like a hub (unless ``--no-lock``), publishes a pointer with ``protocol: 0``, refuses
every session with PROTOCOL_MISMATCH, and exits on SIGTERM after removing its pointer.

usage: python old_hub.py RUNTIME_DIR KEY [--no-lock]
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path


def main() -> None:
    runtime, key = Path(sys.argv[1]), sys.argv[2]
    take_lock = "--no-lock" not in sys.argv
    runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
    if take_lock:
        fd = os.open(runtime / f"hub-{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "role": "hub"}).encode(), 0)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    pointer = runtime / f"hub-{key}.json"
    pointer.write_text(json.dumps({
        "version": 1, "protocol": 0, "key": key, "pid": os.getpid(), "port": server.getsockname()[1],
        "token": "old-generation-token", "log": str(runtime / f"hub-{key}.log"), "started_at": time.time(),
    }))

    def stop(signum: int, frame: object) -> None:
        pointer.unlink(missing_ok=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        conn.recv(65536)
        conn.sendall(b'{"type":"error","code":"PROTOCOL_MISMATCH","message":"this hub speaks protocol 0"}\n')
        conn.close()


if __name__ == "__main__":
    main()
