"""Restart paths of the AOF with real node processes: a plain restart, a planned one
(SHUTDOWN REWRITE-AOF + aof-enqueue-jobs-once), a truncated file with both
aof-load-truncated settings, a corrupt record found and fixed by check-aof, and
-LOADING while a large file loads."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from conveyor.persistence.reader import read_records
from tests.node.helpers import RawClient
from tests.servers import NodeProcess, running_node

AOF = ["--appendonly", "yes", "--appendfsync", "always"]


def show(client: redis.Redis, job_id: bytes) -> dict[str, object] | None:
    fields = client.execute_command("SHOW", job_id)
    if fields is None:
        return None
    return {key.decode(): value for key, value in zip(fields[::2], fields[1::2], strict=True)}


def test_restart_brings_jobs_back_as_disque_does(tmp_path: Path) -> None:
    with running_node(tmp_path, *AOF) as node:
        client = node.client()
        queued = client.execute_command("ADDJOB", "q", "queued", 0, "RETRY", 30)
        delayed = client.execute_command("ADDJOB", "q", "delayed", 0, "DELAY", 600)
        amo = client.execute_command("ADDJOB", "amo", "once", 0, "RETRY", 0)
        acked = client.execute_command("ADDJOB", "q2", "acked", 0)
        assert client.execute_command("GETJOB", "NOHANG", "FROM", "amo")[0][1] == amo
        assert client.execute_command("ACKJOB", acked) == 1
    with running_node(tmp_path, *AOF) as node:
        client = node.client()
        job = show(client, queued)
        assert job is not None and job["state"] == b"active"  # requeued after RETRY
        assert 29_000 <= int(job["next-requeue-within"]) <= 30_300  # type: ignore[call-overload]
        job = show(client, delayed)
        assert job is not None and job["state"] == b"active" and job["body"] == b"delayed"
        job = show(client, amo)  # at-most-once and delivered: never queued again
        assert job is not None and job["next-requeue-within"] is None
        assert show(client, acked) is None
        assert client.execute_command("QLEN", "q") == 0


def test_planned_restart_brings_the_queues_back_in_order(tmp_path: Path) -> None:
    config_file = tmp_path / "node.conf"
    config_file.write_text("appendonly yes\naof-enqueue-jobs-once no\n")
    with running_node(tmp_path, config_file=config_file) as node:
        client = node.client()
        first = [client.execute_command("ADDJOB", "q1", f"job {n}", 0) for n in range(20)]
        for n in range(10):
            client.execute_command("ADDJOB", "q2", f"job {n}", 0)
        taken = [job[1] for job in client.execute_command("GETJOB", "COUNT", 3, "FROM", "q1")]
        assert taken == first[:3]
        before = {q: client.execute_command("QPEEK", q, 100) for q in ("q1", "q2")}
        client.execute_command("CONFIG", "SET", "aof-enqueue-jobs-once", "yes")
        client.execute_command("CONFIG", "REWRITE")
        with pytest.raises(redis.ConnectionError):
            client.execute_command("SHUTDOWN", "REWRITE-AOF")
        node.process.wait(10)
    # The rewritten file holds the current images: 27 queued, 3 active, no DELJOB.
    records = list(read_records((tmp_path / "disque.aof").read_bytes()))
    assert len(records) == 30 and {r.command for r in records} == {b"LOADJOB"}
    with running_node(tmp_path, config_file=config_file) as node:
        client = node.client()
        for queue, jobs in before.items():
            assert client.execute_command("QPEEK", queue, 100) == jobs
        assert show(client, taken[0])["state"] == b"active"  # type: ignore[index]
        # It switched itself off, in the file too: a crash restart must not enqueue again.
        assert client.config_get("aof-enqueue-jobs-once") == {"aof-enqueue-jobs-once": "no"}
    assert "aof-enqueue-jobs-once no" in config_file.read_text()


def write_jobs(data_dir: Path, count: int) -> list[bytes]:
    with running_node(data_dir, *AOF) as node:
        client = node.client()
        return [client.execute_command("ADDJOB", "q", f"body {n}", 0) for n in range(count)]


def record_ends(path: Path) -> list[int]:
    return [record.end for record in read_records(path.read_bytes())]


@pytest.mark.parametrize("load_truncated", ["yes", "no"])
def test_a_truncated_file(tmp_path: Path, load_truncated: str) -> None:
    ids = write_jobs(tmp_path, 5)
    aof = tmp_path / "disque.aof"
    ends = record_ends(aof)
    cut_at = ends[3] + 20  # inside the fifth record
    with open(aof, "r+b") as handle:
        handle.truncate(cut_at)
    args = [*AOF, "--aof-load-truncated", load_truncated]
    if load_truncated == "yes":
        with running_node(tmp_path, *args) as node:
            client = node.client()
            assert [show(client, job_id) is not None for job_id in ids] == [True] * 4 + [False]
        assert aof.stat().st_size == ends[3]
        assert f"Truncating the AOF at offset {ends[3]}" in node.log_path.read_text()
    else:
        log = exit_log(tmp_path, *args)
        assert f"Unexpected end of file reading the append only file at offset {ends[3]}" in log
        assert aof.stat().st_size == cut_at  # left for the operator


def exit_log(data_dir: Path, *args: str) -> str:
    """Start a node that must refuse its AOF: its log once it exited (non-zero). Not
    through the ready check: the node listens (answering -LOADING) while it loads, so a
    PING can win the race against its exit."""
    node = NodeProcess(data_dir, *args, wait=False)
    try:
        assert node.process.wait(30) != 0  # the node exited early
    finally:
        node.stop()
    return node.log_path.read_text()


def check_aof(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conveyor.cli", "check-aof", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_corrupt_record_is_named_and_check_aof_fixes_it(tmp_path: Path) -> None:
    ids = write_jobs(tmp_path, 6)
    aof = tmp_path / "disque.aof"
    ends = record_ends(aof)
    data = bytearray(aof.read_bytes())
    data[ends[2]] = ord("x")  # the fourth record's '*'
    aof.write_bytes(bytes(data))
    log = exit_log(tmp_path, *AOF)
    assert f"offset {ends[2]}" in log and "check-aof --fix" in log
    checked = check_aof(str(aof))
    assert checked.returncode == 1 and str(ends[2]) in checked.stdout + checked.stderr
    fixed = check_aof("--fix", "--yes", str(aof))
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert aof.stat().st_size == ends[2]
    with running_node(tmp_path, *AOF) as node:
        client = node.client()
        assert [show(client, job_id) is not None for job_id in ids] == [True] * 3 + [False] * 3


def test_clients_get_loading_while_a_large_file_loads(tmp_path: Path) -> None:
    # 200,000 records built by a first node (pipelined), then loaded by a second.
    with running_node(tmp_path, "--appendonly", "yes", "--appendfsync", "no") as node:
        client = node.client()
        for _ in range(20):
            pipe = client.pipeline(transaction=False)
            for n in range(10_000):
                pipe.execute_command("ADDJOB", "q", f"job {n}", 0)
            pipe.execute()
    node = NodeProcess(tmp_path, "--appendonly", "yes")
    try:
        # A raw socket: redis-py would retry its BusyLoadingError quietly.
        # INFO in the same read runs in the same round: loading for sure.
        with RawClient(node.port, timeout_s=10) as raw:
            raw.send(b"PING\r\nQLEN q\r\nINFO persistence\r\n")
            replies = b"".join(raw.read_raw(10) for _ in range(3))
            loading_error = b"-LOADING Disque is loading the dataset in memory\r\n"
            assert replies.startswith(loading_error * 2)
            assert b"loading:1\r\n" in replies and b"loading_total_bytes:" in replies
            # On the same socket until the file is in: a redis-py client would send CLIENT
            # SETINFO on connecting, which a loading node refuses (-LOADING, as Disque's
            # CLIENT is not allowed while loading), and give up if loading outlasts its
            # retries (a slow machine, pure Python).
            deadline = time.monotonic() + 60
            while b"loading:1\r\n" in replies and time.monotonic() < deadline:
                time.sleep(0.05)
                replies = raw.call_raw("INFO", "persistence", timeout_s=10)
        client = node.client()
        assert client.execute_command("PING") in (b"PONG", "PONG", True)
        assert client.info("persistence")["loading"] == 0
        assert int(client.info("jobs")["registered_jobs"]) == 200_000
    finally:
        node.stop()


def test_a_truncated_file_loads_without_writing_its_records_again(tmp_path: Path) -> None:
    # The job-event log makes the load record job events; the AOF must not take them.
    args = [*AOF, "--event-log", str(tmp_path / "events")]
    with running_node(tmp_path, *args) as node:
        client = node.client()
        ids = [client.execute_command("ADDJOB", "q", f"body {n}", 0) for n in range(5)]
        client.execute_command("ACKJOB", ids[0])
    aof = tmp_path / "disque.aof"
    ends = record_ends(aof)
    with open(aof, "ab") as handle:
        handle.write(b"*2\r\n$7\r\nLOADJOB\r\n$")
    with running_node(tmp_path, *args) as node:
        client = node.client()
        assert [show(client, job_id) is not None for job_id in ids] == [False] + [True] * 4
        client.execute_command("ADDJOB", "q", "after", 0)  # the AOF has been written since
    # The records it had, then the new job's: none of the loaded ones twice.
    after = record_ends(aof)
    assert after[: len(ends)] == ends and len(after) == len(ends) + 1


def test_a_length_damaged_past_the_end_is_refused_not_cut(tmp_path: Path) -> None:
    # The third record's length gets two more digits: it runs past the end of the file
    # like a cut-off last record, but cutting there would lose the three jobs after it.
    write_jobs(tmp_path, 6)
    aof = tmp_path / "disque.aof"
    ends = record_ends(aof)
    data = aof.read_bytes()
    digits = data.index(b"\r\n$", ends[1] + 10) + 3
    damaged = data[:digits] + b"99" + data[digits:]
    aof.write_bytes(damaged)
    log = exit_log(tmp_path, *AOF, "--aof-load-truncated", "yes")
    assert f"Bad file format reading the append only file at offset {ends[1]}" in log
    assert "a damaged length, not a cut-off record" in log and "check-aof --fix" in log
    assert aof.read_bytes() == damaged
