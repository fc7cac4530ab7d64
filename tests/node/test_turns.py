"""A client pipelining thousands of requests in one read gets them run a turn at a time.

Between turns the event loop serves everyone else (the abuse probe's canary saw 9 s,
then 260 ms, of stall while one read of 25,000 QPEEKs ran to its output-buffer limit),
and no new bytes are read from that client until its read is done. Driven in-process
with a recording transport, so the turns are counted, not timed.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from conveyor.node.config import Config
from conveyor.node.connection import TURN_REQUESTS, Connection
from conveyor.node.server import Server


class RecordingTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.reading = True
        self.pauses = 0

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False

    def is_reading(self) -> bool:
        return self.reading

    def pause_reading(self) -> None:
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str) -> object:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name)

    def close(self) -> None:
        pass


def end_turn(server: Server) -> None:
    """What the loop does at the end of a turn: write the replies left for it."""
    server.turn_replies.flush()


def test_a_long_pipeline_runs_a_turn_at_a_time(tmp_path: Path) -> None:
    config = Config()
    config.set("dir", str(tmp_path))
    server = Server(config, "d" * 40, b"d" * 20, random.Random(1))
    requests = 2 * TURN_REQUESTS + 500

    async def scenario() -> None:
        server.loop = asyncio.get_running_loop()
        conn = Connection(server)
        transport = RecordingTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn.data_received(b"*1\r\n$4\r\nPING\r\n" * requests)
        # The replies wait for the end of the turn, and leave in one write.
        assert transport.written == [] and conn.unsent is not None
        end_turn(server)
        # First turn only: the rest waits, and the client is not read meanwhile.
        assert b"".join(transport.written).count(b"+PONG") == TURN_REQUESTS
        assert len(transport.written) == 1 and not transport.reading
        await asyncio.sleep(0)  # one turn of the loop: another client could run here
        end_turn(server)
        assert b"".join(transport.written).count(b"+PONG") == 2 * TURN_REQUESTS
        for _ in range(3):
            await asyncio.sleep(0)
        assert b"".join(transport.written).count(b"+PONG") == requests
        assert transport.reading and transport.pauses == 1
        # The stream goes on normally afterwards.
        conn.data_received(b"PING\r\n")
        end_turn(server)
        assert transport.written[-1] == b"+PONG\r\n"

    asyncio.run(scenario())
