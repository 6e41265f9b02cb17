"""A command that holds a board's writer thread until the test releases it: the commands sent
meanwhile queue up, and run as one batch once it is released."""

from __future__ import annotations

import threading

from services.board.store import Tx


class Gate:
    """Pass it to ``store.command``; ``started`` is set once the writer runs it, and it returns
    (writing nothing) once ``release`` is set, or fails after 10 s so a test never hangs."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, tx: Tx) -> None:
        self.started.set()
        if not self.release.wait(10):
            raise AssertionError("the gate was never released")
