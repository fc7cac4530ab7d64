"""A node runs for months: what the GC policy freezes must not be kept for good.

gc_policy freezes the survivors of each full collection. A frozen object that later
becomes cyclic garbage is never looked at again, and asyncio's transports are such
cycles: each client connected across a full collection left its transport behind when
it went. Each script runs in its own interpreter (the policy is process-wide), with
THAW_EVERY_S at 0 so that the next full collection is the one that must free it.
"""

from __future__ import annotations

import subprocess
import sys

FROZEN_CYCLE = """
import gc, weakref
from conveyor.node import gc_policy
gc_policy.install()
gc_policy.THAW_EVERY_S = 0
class Node:
    pass
a = Node(); a.self = a  # a cycle alive across a full collection: frozen
probe = weakref.ref(a)
gc.collect()
assert gc.get_freeze_count() > 0
del a  # now garbage, and only the collector can free it
gc.collect()
assert probe() is None, "a cycle frozen while alive was never freed"
assert gc.get_freeze_count() > 0, "survivors are still frozen after the thaw"
print("ok")
"""

CLOSED_CLIENTS = """
import asyncio, gc, random, sys, tempfile, weakref
from conveyor.node import gc_policy
from conveyor.node.config import Config
from conveyor.node.server import Server

async def main() -> None:
    config = Config()
    config.set("dir", tempfile.mkdtemp())
    config.apply("port", ["0"])
    server = Server(config, "a" * 40, b"a" * 20, random.Random(1))
    await server.start()
    gc_policy.THAW_EVERY_S = 0
    port = server._asyncio_server.sockets[0].getsockname()[1]
    streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(20)]
    for reader, writer in streams:
        writer.write(b"PING\\r\\n")
        assert await reader.readline() == b"+PONG\\r\\n"
    transports = [weakref.ref(conn.transport) for conn in server.clients.values()]
    assert len(transports) == 20
    gc.collect()  # the connections are alive: their transports are frozen
    for reader, writer in streams:
        writer.close()
        await writer.wait_closed()
    del streams, reader, writer
    for _ in range(500):
        if not server.clients:
            break
        await asyncio.sleep(0.01)
    assert not server.clients
    await asyncio.sleep(0)  # the transports' connection_lost callbacks have run
    gc.collect()
    kept = sum(ref() is not None for ref in transports)
    assert kept == 0, f"{kept} closed client transports kept"
    await server.stop()
    print("ok")

asyncio.run(main())
"""


def run_script(script: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "ok"


def test_a_cycle_frozen_while_alive_is_freed_once_it_is_garbage() -> None:
    run_script(FROZEN_CYCLE)


def test_clients_connected_across_a_full_collection_leave_no_transport_behind() -> None:
    run_script(CLOSED_CLIENTS)
