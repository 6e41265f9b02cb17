"""A raw reader of ``GET /api/v1/events`` for the condition tests: the frames exactly as the
bytes came, so a test can see that a signal frame carries no ``id:`` line."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson


@dataclass(frozen=True)
class RawFrame:
    raw: bytes
    fields: dict[str, str]

    @property
    def is_signal(self) -> bool:
        return self.fields.get("event") == "signal"

    @property
    def data(self) -> Any:
        return orjson.loads(self.fields["data"]) if "data" in self.fields else None


def parse_frame(block: bytes) -> RawFrame | None:
    fields: dict[str, str] = {}
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        fields[name.decode()] = value[1:].decode() if value.startswith(b" ") else value.decode()
    return RawFrame(block, fields) if fields else None


class RawStream:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.buffer = b""
        self.frames: list[RawFrame] = []
        self.taken = 0

    @classmethod
    async def open(cls, session: aiohttp.ClientSession, url: str, token: str, query: str = "") -> RawStream:
        response = await session.get(f"{url}/api/v1/events{query}", headers={"Authorization": f"Bearer {token}"})
        assert response.status == 200, await response.text()
        stream = cls(response)
        await stream.wait_for(lambda frame: "retry" in frame.fields)  # the server registered the stream
        return stream

    async def _read(self, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            chunk = await self.response.content.readany()
        if not chunk:
            raise EOFError("the stream ended")
        self.buffer += chunk
        while b"\n\n" in self.buffer:
            block, self.buffer = self.buffer.split(b"\n\n", 1)
            frame = parse_frame(block)
            if frame is not None:
                self.frames.append(frame)

    async def wait_for(self, predicate: Any, timeout: float = 10.0) -> RawFrame:
        """The next frame (after the ones already taken) that satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        while True:
            while self.taken < len(self.frames):
                frame = self.frames[self.taken]
                self.taken += 1
                if predicate(frame):
                    return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching frame in {timeout} s; saw {[f.fields for f in self.frames]}")
            await self._read(remaining)

    async def signal(self, type_: str, timeout: float = 10.0, *, project: str | None = "demo") -> dict[str, Any]:
        """The next signal of ``type_`` (in ``project``, unless None), checked to carry no id."""
        frame = await self.wait_for(
            lambda f: f.is_signal and f.data["type"] == type_ and project in (None, f.data["project_id"]), timeout
        )
        assert "id" not in frame.fields and not frame.raw.startswith(b"id:") and b"\nid:" not in frame.raw, frame.raw
        data: dict[str, Any] = frame.data
        return data

    def signals(self, type_: str | None = None) -> list[dict[str, Any]]:
        """Every signal received so far (taken or not), optionally of one type."""
        return [f.data for f in self.frames if f.is_signal and (type_ is None or f.data["type"] == type_)]

    def close(self) -> None:
        self.response.close()


def of(stream: RawStream, type_: str, project: str = "demo") -> list[dict[str, Any]]:
    """The signals of ``type_`` about ``project`` the stream has received so far."""
    return [s for s in stream.signals(type_) if s["project_id"] == project]
