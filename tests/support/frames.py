"""A live stream's data frames exactly as the board sent them, for the hand-off tests: whether a
frame came from the writer's hand-off or from the log reader, its id and its data must be the same."""

from __future__ import annotations

import asyncio

import aiohttp

from shared.sse import SSEMessage, SSEParser
from tests.support.board import RunningBoard


class FrameStream:
    """One live stream's data frames, as sent: (id, the data line's text)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.parser = SSEParser()
        self.frames: list[tuple[int, str]] = []
        self.cursor = 0

    @classmethod
    async def open(cls, session: aiohttp.ClientSession, board: RunningBoard, query: str = "") -> FrameStream:
        response = await session.get(f"{board.url}/api/v1/events{query}",
                                     headers={"Authorization": f"Bearer {board.token}"})
        assert response.status == 200
        return cls(response)

    async def until(self, revision: int, timeout: float = 20.0) -> list[tuple[int, str]]:
        """Every data frame so far, once the stream's cursor has reached ``revision``."""
        async with asyncio.timeout(timeout):
            while self.cursor < revision:
                chunk = await self.response.content.readany()
                assert chunk, "the stream ended early"
                for item in self.parser.feed(chunk):
                    if isinstance(item, SSEMessage) and item.id is not None:
                        self.cursor = int(item.id)
                        if item.data is not None:
                            self.frames.append((self.cursor, item.data))
        return self.frames

    def close(self) -> None:
        self.response.close()
