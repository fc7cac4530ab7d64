"""`import_job` against what a real Disque node held after loading its AOF.

The recorded AOF (tests/fixtures/disque_wire, from Disque 1.0-rc1) is decoded with the
job codec and imported into a core whose clock is the recording's `loaded_unix_ms`;
each job's SHOW must then agree with what the restarted Disque showed, for the same
node ID, a fresh node ID, and `aof-enqueue-jobs-once yes`. Exporting a job again
(`job_record`) must give back the record it came from.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import hiredis
import pytest

from conveyor.core.codec import decode_job, encode_job
from conveyor.core.job import QUEUED
from conveyor.core.node import NodeCore
from conveyor.core.records import job_record
from conveyor.node.replies import show_fields

FIXTURES = Path(__file__).parent.parent / "fixtures" / "disque_wire"
# Both sides draw +-250 ms of requeue jitter; each is compared with the centre,
# DELAY + RETRY after the load, allowing for the gap between load and SHOW.
JITTER_MS = 250


def aof_commands(name: str) -> list[list[bytes]]:
    reader = hiredis.Reader()
    reader.feed((FIXTURES / name).read_bytes())
    commands = []
    while (command := reader.gets()) is not False:
        commands.append(command)
    return commands


def load(name: str, node_id: str, now_ms: int, enqueue: bool) -> NodeCore:
    core = NodeCore(node_id, b"seed", random.Random(5))
    for command in aof_commands(name):
        if command[0] == b"LOADJOB":
            record, end = decode_job(command[1])
            assert end == len(command[1])
            core.import_job(record, now_ms, enqueue=enqueue)
        else:
            assert command[0] == b"DELJOB"
            core.del_jobs([command[1]], now_ms)
    return core


def show(core: NodeCore, job_id: bytes, now_ms: int) -> dict[str, Any]:
    fields = show_fields(core.jobs[job_id], core.node_name, now_ms)
    return dict(zip([key.decode() for key in fields[::2]], fields[1::2], strict=True))


RESTARTS = [("after-restart.json", "appendonly.aof", index) for index in range(3)] + [
    ("after-restart-rewritten.json", "rewritten.aof", index) for index in range(2)
]


@pytest.mark.parametrize(("expected_file", "aof", "index"), RESTARTS)
def test_imported_jobs_match_a_restarted_disque(expected_file: str, aof: str, index: int) -> None:
    restart = json.loads((FIXTURES / expected_file).read_text())["restarts"][index]
    assert restart["loaded_file"] == aof
    now = restart["loaded_unix_ms"]
    enqueue = restart["config"]["aof-enqueue-jobs-once"] == "yes"
    core = load(aof, restart["node_id"], now, enqueue)
    assert_matches_restart(core, restart)


def assert_matches_restart(core: NodeCore, restart: dict[str, Any]) -> None:
    """Every job's SHOW and every QLEN as the restarted Disque showed them."""
    now = restart["loaded_unix_ms"]
    compared = 0
    for expected in restart["jobs"]:
        job_id = expected["id"].encode()
        if "show" in expected:  # expired before the load, or deleted by a DELJOB
            assert job_id not in core.jobs, expected["label"]
            continue
        got = show(core, job_id, restart["observed_until_unix_ms"])
        label = expected["label"]
        assert got["state"].decode() == expected["state"], label
        for key in ("repl", "ctime", "delay", "retry", "nacks", "additional-deliveries"):
            assert got[key] == expected[key], (label, key)
        assert abs(got["ttl"] - expected["ttl"]) <= 1, label
        assert got["queue"].hex() == expected["queue_hex"], label
        assert got["body"].hex() == expected["body_hex"], label
        assert [n.decode() for n in got["nodes-delivered"]] == expected["nodes-delivered"], label
        assert got["nodes-confirmed"] == [], label
        if expected["state"] == "active":
            if expected["next-requeue-within"] is None:
                assert got["next-requeue-within"] is None, label
            else:
                centre = (expected["delay"] + expected["retry"]) * 1000
                slack = JITTER_MS + (restart["observed_until_unix_ms"] - now)
                assert abs(expected["next-requeue-within"] - centre) <= slack + 150, label
                assert abs(got["next-requeue-within"] - centre) <= slack, label
        compared += 1
    assert compared == len(core.jobs) >= 20
    for entry in restart["qlen"]:
        assert core.qlen(bytes.fromhex(entry["queue_hex"])) == entry["qlen"], entry["queue"]


def test_export_gives_back_the_imported_record() -> None:
    restart = json.loads((FIXTURES / "after-restart.json").read_text())["restarts"][0]
    now = restart["loaded_unix_ms"]
    core = NodeCore(restart["node_id"], b"seed", random.Random(5))
    exported = 0
    for command in aof_commands("appendonly.aof"):
        if command[0] != b"LOADJOB":
            continue
        record, _ = decode_job(command[1])
        job = core.import_job(record, now)
        if job is None:
            continue
        again = job_record(job, core.node_name, now)
        # A queued job comes back active (it is re-queued after DELAY + RETRY).
        expected_state = record.state if record.state != QUEUED else job.state
        assert again == record._replace(state=expected_state), record.id
        if expected_state == record.state:
            assert encode_job(again) == command[1]
        exported += 1
    assert exported >= 20


def test_bus_copies_carry_time_left_and_no_delivered_flag() -> None:
    now = 1_795_344_794_942
    core = NodeCore("8bd36d49a0230449efcad4173c4b4c07f2f63204", b"seed", random.Random(5))
    job = core.add_default_job(b"q", b"body", now)
    core.get_jobs([b"q"], 1, now)
    record = job_record(job, core.node_name, now + 1500, for_bus=True)
    assert record.etime == 86398 + 1  # 86398.5 s left, rounded down, plus one
    assert record.flags == 3  # BCAST_QUEUED | BCAST_WILLQUEUE, DELIVERED cleared
    copy = NodeCore("0" * 40, b"other", random.Random(6))
    imported = copy.import_job(record, now + 1500, etime_relative=True)
    assert imported is not None
    assert imported.etime == now + 1500 + 86398 * 1000
    assert imported.nodes_delivered == ()
