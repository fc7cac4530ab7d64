"""The AOF against a real Disque's: its recorded file loads, and ours has the same records.

1. The recorded appendonly.aof and rewritten.aof (Disque 1.0-rc1) go through the node's
   loader (persistence/loader.py) into a core whose clock is the recording's
   `loaded_unix_ms`; every job's SHOW and every QLEN must match what the restarted Disque
   showed, for aof-enqueue-jobs-once no and yes.
2. The recorded session (commands.jsonl) is replayed against a real Conveyor node with
   `appendonly yes`: its file must hold the same record stream — LOADJOB per accepted
   ADDJOB, DELJOB per ACKJOB — and each job must decode to the recorded one, field by
   field, but for what names the node and the moment (ID, ctime, absolute etime).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import redis

from conveyor.core.codec import decode_job
from conveyor.core.node import NodeCore
from conveyor.persistence.loader import LoadStats, load
from conveyor.persistence.reader import read_records
from tests.core.test_import_job import FIXTURES, assert_matches_restart
from tests.servers import running_node

RESTARTS = [("after-restart.json", "appendonly.aof", index) for index in range(3)] + [
    ("after-restart-rewritten.json", "rewritten.aof", index) for index in range(2)
]


@pytest.mark.parametrize(("expected_file", "aof", "index"), RESTARTS)
def test_recorded_disque_aof_loads_as_disque_loaded_it(
    expected_file: str, aof: str, index: int
) -> None:
    restart = json.loads((FIXTURES / expected_file).read_text())["restarts"][index]
    assert restart["loaded_file"] == aof
    enqueue = restart["config"]["aof-enqueue-jobs-once"] == "yes"
    core = NodeCore(restart["node_id"], b"seed", random.Random(5))
    stats = LoadStats()
    data = (FIXTURES / aof).read_bytes()
    for _ in load(data, core, lambda: int(restart["loaded_unix_ms"]), enqueue=enqueue, stats=stats):
        pass
    assert stats.loaded_bytes == stats.total_bytes == len(data)
    assert stats.records == (27 if aof == "appendonly.aof" else 23)
    assert_matches_restart(core, restart)


def recorded_session() -> list[dict[str, Any]]:
    lines = (FIXTURES / "commands.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def replay(client: Any, session: list[dict[str, Any]]) -> dict[bytes, bytes]:
    """Send every recorded command, with recorded job IDs mapped to ours; the mapping."""
    ids: dict[bytes, bytes] = {}
    for entry in session:
        args = [bytes.fromhex(arg) for arg in entry["args_hex"]]
        name = args[0].upper()
        if name in (b"CLUSTER", b"BGREWRITEAOF", b"SHOW", b"QLEN"):
            continue  # identity and reads: no records
        args = [ids.get(arg, arg) for arg in args]
        try:
            reply = client.execute_command(*args)
        except redis.ResponseError as exc:  # the MAXLEN refusal is part of the session
            assert "MAXLEN" in str(exc) or "maxlen" in str(exc).lower(), (args, exc)
            continue
        if name == b"ADDJOB":
            ids[entry["reply"]["status"].encode()] = reply
    return ids


def records_of(path: Path) -> list[tuple[bytes, bytes]]:
    return [(rec.command, rec.argument) for rec in read_records(path.read_bytes())]


def comparable(argument: bytes) -> tuple[Any, ...]:
    record, _ = decode_job(argument)
    ttl_s = record.etime - record.ctime // 1_000_000_000
    return (
        record.state,
        record.flags,
        record.repl,
        record.delay,
        record.retry,
        record.nacks,
        record.additional_deliveries,
        record.queue,
        record.body,
        len(record.nodes),
        ttl_s,
    )


def test_replayed_session_writes_the_recorded_records(tmp_path: Path) -> None:
    session = recorded_session()
    recorded = records_of(FIXTURES / "appendonly.aof")
    with running_node(tmp_path, "--appendonly", "yes", "--appendfsync", "always") as node:
        client = node.client()
        ids = replay(client, session)
        client.close()
    ours = records_of(tmp_path / "disque.aof")
    assert [command for command, _ in ours] == [command for command, _ in recorded]
    for (command, theirs), (_, mine) in zip(recorded, ours, strict=True):
        if command == b"DELJOB":
            assert mine == ids[theirs]
            continue
        record, _ = decode_job(theirs)
        assert decode_job(mine)[0].id == ids[record.id]
        expected = comparable(theirs)
        got = comparable(mine)
        # TTLs are whole seconds from a ctime in ms: one second of rounding either way.
        assert got[:-1] == expected[:-1], record.id
        assert abs(got[-1] - expected[-1]) <= 1, record.id
