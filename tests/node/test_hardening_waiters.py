"""Issue 9, defect 3: waiters must not pile up while one client stays blocked.

The load of the review, shortened: one client blocked in GETJOB TIMEOUT 0 on a queue
the whole time, 200 clients cycling GETJOB TIMEOUT 20 on the same queue. Afterwards the
node must hold exactly the one live waiter and no timer entry for the finished ones
(`DEBUG RESOURCES`), and nothing once the last client goes. RSS is the benchmark's
business (`make bench`, phase blocked-cycle); this counts the structures themselves.
"""

from __future__ import annotations

import asyncio
import time

from tests.node.helpers import strict_client
from tests.servers import NodeProcess

CYCLERS = 200
CYCLE_SECONDS = 3.0
GETJOB_20MS = b"*5\r\n$6\r\nGETJOB\r\n$7\r\nTIMEOUT\r\n$2\r\n20\r\n$4\r\nFROM\r\n$1\r\nq\r\n"
NULL_ARRAY = b"*-1\r\n"


async def _cycle(port: int, stop_at: float) -> int:
    """Ask again each time the 20 ms GETJOB times out; return how many completed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    done = 0
    try:
        while time.monotonic() < stop_at:
            writer.write(GETJOB_20MS)
            reply = await asyncio.wait_for(reader.readexactly(len(NULL_ARRAY)), 5)
            assert reply == NULL_ARRAY, reply
            done += 1
    finally:
        writer.close()
        await writer.wait_closed()
    return done


async def _run_cyclers(port: int) -> int:
    stop_at = time.monotonic() + CYCLE_SECONDS
    counts = await asyncio.gather(*(_cycle(port, stop_at) for _ in range(CYCLERS)))
    return sum(counts)


def resources(node: NodeProcess) -> dict[str, int]:
    client = strict_client(node)
    try:
        values = client.execute_command("DEBUG", "RESOURCES")
    finally:
        client.close()
    names = (
        "waiter_entries",
        "blocked_clients",
        "timer_calls",
        "queues",
        "jobs",
        "timer_job_entries",
        "scan_snapshots",
    )
    return dict(zip(names, values, strict=True))


def test_cycling_getjobs_beside_a_long_waiter_leave_nothing_behind(
    fresh_node: NodeProcess,
) -> None:
    long_waiter = strict_client(fresh_node, socket_timeout=30)
    connection = long_waiter.connection_pool.get_connection()
    connection.send_command("GETJOB", "TIMEOUT", "0", "FROM", "q")
    for _ in range(100):  # the long waiter is filed first
        if resources(fresh_node)["blocked_clients"] == 1:
            break
        time.sleep(0.02)
    completed = asyncio.run(_run_cyclers(fresh_node.port))
    assert completed > CYCLERS  # every cycler went round at least once
    after = resources(fresh_node)
    assert after["waiter_entries"] == 1, after
    assert after["blocked_clients"] == 1, after
    assert after["timer_calls"] <= 70, after  # live queue GC, cancelled ones dropped in bulk
    connection.disconnect()
    long_waiter.connection_pool.release(connection)
    long_waiter.close()
    for _ in range(100):
        gone = resources(fresh_node)
        if gone["blocked_clients"] == 0:
            break
        time.sleep(0.02)
    assert gone["waiter_entries"] == 0 and gone["blocked_clients"] == 0, gone
