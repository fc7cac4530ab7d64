"""A stand-in for an asyncio transport, for driving a node's Connection in-process.

Just what a Connection asks of its transport; what it writes is kept, and reading,
closing and aborting are recorded for the tests to assert on.
"""

from __future__ import annotations


class FakeTransport:
    def __init__(self, port: int = 1) -> None:
        self.port = port
        self.written: list[bytes] = []
        self.closing = False
        self.aborted = False
        self.reading = True

    @property
    def out(self) -> bytes:
        """Everything written so far, in one piece."""
        return b"".join(self.written)

    def get_extra_info(self, name: str) -> object:
        return {"peername": ("127.0.0.1", self.port), "sockname": ("127.0.0.1", 7711)}.get(name)

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def is_reading(self) -> bool:
        return self.reading

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = self.aborted = True
