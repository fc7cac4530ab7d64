"""The job-event log (`event-log DIR`): real nodes writing JSON lines, read back from disk.

Most tests share one node and look only at the events of their own jobs. Nodes that get
stopped, restarted, broken or reconfigured are the test's own. The writer's hourly
rotation, buffer limit and failure handling are tested directly, on an injected clock,
at the end.
"""

from __future__ import annotations

import calendar
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.core.effects import EV_ADDED_QUEUED
from conveyor.core.job import Job
from conveyor.node.event_log import EventLog, queue_json
from tests.node.helpers import error_of, info, strict_client, wait_until
from tests.servers import NodeProcess, running_node

KEYS = ["time_ms", "node", "event", "id", "queue", "nacks", "additional_deliveries"]
NAME_RE = re.compile(r"^events-(\d{8}T\d{2})-([0-9a-f]{8})\.jsonl$")
HOUR_MS = 3_600_000


# -- reading the log ---------------------------------------------------------------------------
def read_events(directory: Path) -> list[dict[str, Any]]:
    """Every complete line of every event file, checked for its exact shape."""
    events: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.jsonl")):
        match = NAME_RE.match(path.name)
        assert match, path.name
        data = path.read_bytes()
        # The node may be appending right now: only whole lines count.
        for line in data[: data.rfind(b"\n") + 1].splitlines():
            pairs = json.loads(line, object_pairs_hook=list)
            assert [key for key, _ in pairs] == KEYS, line
            event = dict(pairs)
            assert isinstance(event["time_ms"], int)
            assert re.fullmatch(r"[0-9a-f]{40}", event["node"])
            assert event["node"][:8] == match.group(2)
            hour = time.strftime("%Y%m%dT%H", time.gmtime(event["time_ms"] // 1000))
            assert hour == match.group(1), (path.name, event)
            events.append(event)
    return events


def events_of(directory: Path, job_id: bytes) -> list[dict[str, Any]]:
    return [event for event in read_events(directory) if event["id"] == job_id.decode()]


def wait_kinds(directory: Path, job_id: bytes, kinds: list[str]) -> list[dict[str, Any]]:
    """Poll until the job's events are exactly `kinds` (flushes take about a second)."""

    def done() -> list[dict[str, Any]] | None:
        events = events_of(directory, job_id)
        return events if [event["event"] for event in events] == kinds else None

    try:
        return wait_until(done, timeout_s=8)
    except AssertionError:
        got = [event["event"] for event in events_of(directory, job_id)]
        raise AssertionError(f"events of {job_id!r}: {got}, expected {kinds}") from None


def counters(events: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    return [(e["event"], e["nacks"], e["additional_deliveries"]) for e in events]


# -- fixtures -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProcess, Path]]:
    base = tmp_path_factory.mktemp("eventlog")
    events = base / "events"
    with running_node(base / "node", "--event-log", str(events)) as node:
        yield node, events


@pytest.fixture
def log_client(logged: tuple[NodeProcess, Path]) -> Iterator[tuple[redis.Redis, Path]]:
    node, events = logged
    client = strict_client(node)
    yield client, events
    client.close()


def fetch(r: redis.Redis, queue: str | bytes) -> bytes:
    reply = r.execute_command("GETJOB", "NOHANG", "FROM", queue)
    assert reply is not None, f"nothing in {queue!r}"
    return reply[0][1]


# -- life cycles ------------------------------------------------------------------------------
def test_add_get_ack_lines(log_client: tuple[redis.Redis, Path]) -> None:
    r, directory = log_client
    node_id = r.execute_command("CLUSTER", "MYID").decode()
    before_ms = int(time.time() * 1000)
    job_id = r.execute_command("ADDJOB", "life", "body", "0")
    assert fetch(r, "life") == job_id
    assert r.execute_command("ACKJOB", job_id) == 1
    events = wait_kinds(directory, job_id, ["added", "queued", "delivered", "acked"])
    for event in events:
        assert event["node"] == node_id
        assert event["queue"] == "life"
        assert (event["nacks"], event["additional_deliveries"]) == (0, 0)
        assert event["time_ms"] >= before_ms - 1000
    times = [event["time_ms"] for event in events]
    assert times == sorted(times)
    assert events[0]["time_ms"] == events[1]["time_ms"]  # added and queued: one ADDJOB


def test_second_job_on_a_queue_takes_the_hot_path_too(log_client: tuple[redis.Redis, Path]) -> None:
    r, directory = log_client
    ids = [r.execute_command("ADDJOB", "hot", f"b{i}", "0") for i in range(3)]
    for job_id in ids:
        wait_kinds(directory, job_id, ["added", "queued"])


def test_fastack_and_deljob(log_client: tuple[redis.Redis, Path]) -> None:
    r, directory = log_client
    fast = r.execute_command("ADDJOB", "fd", "x", "0")
    gone = r.execute_command("ADDJOB", "fd", "y", "0")
    assert r.execute_command("FASTACK", fast) == 1
    assert r.execute_command("DELJOB", gone) == 1
    wait_kinds(directory, fast, ["added", "queued", "acked"])
    wait_kinds(directory, gone, ["added", "queued", "deleted"])


def test_nack_counts_and_requeues(log_client: tuple[redis.Redis, Path]) -> None:
    r, directory = log_client
    job_id = r.execute_command("ADDJOB", "nq", "x", "0")
    fetch(r, "nq")
    assert r.execute_command("NACK", job_id) == 1
    fetch(r, "nq")
    assert r.execute_command("NACK", job_id, "DELAY", "1") == 1
    events = wait_kinds(
        directory,
        job_id,
        ["added", "queued", "delivered", "nacked", "requeued", "delivered", "nacked", "requeued"],
    )
    assert counters(events)[3:] == [
        ("nacked", 1, 0),
        ("requeued", 1, 0),
        ("delivered", 1, 0),
        ("nacked", 2, 0),
        ("requeued", 2, 0),
    ]
    assert events[-1]["time_ms"] - events[-2]["time_ms"] >= 1000  # the DELAY


def test_retry_timeout_requeues(log_client: tuple[redis.Redis, Path]) -> None:
    r, directory = log_client
    job_id = r.execute_command("ADDJOB", "rq", "x", "0", "RETRY", "1")
    fetch(r, "rq")
    events = wait_kinds(directory, job_id, ["added", "queued", "delivered", "requeued"])
    assert counters(events)[-1] == ("requeued", 0, 1)


def test_delay_then_queued(log_client: tuple[redis.Redis, Path]) -> None:
    r, directory = log_client
    job_id = r.execute_command("ADDJOB", "dq", "x", "0", "DELAY", "1")
    events = wait_kinds(directory, job_id, ["added", "queued"])
    assert events[1]["time_ms"] - events[0]["time_ms"] >= 1000


def test_ttl_expiry(log_client: tuple[redis.Redis, Path]) -> None:
    r, directory = log_client
    job_id = r.execute_command("ADDJOB", "tq", "x", "0", "TTL", "1")
    wait_kinds(directory, job_id, ["added", "queued", "expired"])


def test_dead_letter(log_client: tuple[redis.Redis, Path]) -> None:
    r, directory = log_client
    r.execute_command("CONFIG", "SET", "max-deliveries", "1")
    r.execute_command("CONFIG", "SET", "deadletter-queue", "dlq-events")
    try:
        job_id = r.execute_command("ADDJOB", "dlsrc", "x", "0")
        fetch(r, "dlsrc")
        assert r.execute_command("NACK", job_id) == 1
    finally:
        r.execute_command("CONFIG", "SET", "max-deliveries", "0")
        r.execute_command("CONFIG", "SET", "deadletter-queue", "")
    events = wait_kinds(
        directory,
        job_id,
        ["added", "queued", "delivered", "nacked", "dead-lettered", "requeued"],
    )
    assert [(e["event"], e["queue"]) for e in events[3:]] == [
        ("nacked", "dlsrc"),
        ("dead-lettered", "dlsrc"),  # the queue the job leaves...
        ("requeued", "dlq-events"),  # ...and the one it goes to
    ]
    assert counters(events)[-1] == ("requeued", 1, 0)


@pytest.mark.parametrize(
    "name",
    [
        b'say "hi"',
        b"back\\slash",
        b"new\nline\ttab\r\x00\x1f",
        "caf\u00e9 \u2603".encode(),
        b"\xff\xfe not utf-8 \xc3",
        "</script>\u2028".encode(),
    ],
)
def test_queue_names_are_escaped(log_client: tuple[redis.Redis, Path], name: bytes) -> None:
    r, directory = log_client
    job_id = r.execute_command("ADDJOB", name, "x", "0")
    events = wait_kinds(directory, job_id, ["added", "queued"])
    assert {event["queue"] for event in events} == {name.decode("utf-8", errors="replace")}


def test_flushall_deletes_with_events(log_client: tuple[redis.Redis, Path]) -> None:
    r, directory = log_client
    job_id = r.execute_command("ADDJOB", "fa", "x", "0")
    r.execute_command("DEBUG", "FLUSHALL")
    wait_kinds(directory, job_id, ["added", "queued", "deleted"])


def test_info_fields(log_client: tuple[redis.Redis, Path]) -> None:
    r, directory = log_client
    job_id = r.execute_command("ADDJOB", "inf", "x", "0")
    wait_kinds(directory, job_id, ["added", "queued"])
    node8 = r.execute_command("CLUSTER", "MYID").decode()[:8]
    hours = [time.strftime("%Y%m%dT%H", time.gmtime())]
    fields = info(r, "eventlog")
    hours.append(time.strftime("%Y%m%dT%H", time.gmtime()))  # in case an hour began
    assert fields["event_log_enabled"] == "1"
    assert fields["event_log_file"] in [str(directory / f"events-{h}-{node8}.jsonl") for h in hours]
    written = sum(path.stat().st_size for path in directory.glob("*.jsonl"))
    wait_until(lambda: int(info(r, "eventlog")["event_log_bytes"]) == written)
    assert int(fields["event_log_events"]) >= 2
    assert fields["event_log_dropped"] == "0"
    assert "Eventlog" in r.execute_command(b"INFO").decode()


def test_eviction(tmp_path: Path) -> None:
    directory = tmp_path / "events"
    with running_node(tmp_path / "n", "--event-log", str(directory)) as node:
        r = strict_client(node)
        used = int(info(r, "memory")["used_memory"])
        r.execute_command("CONFIG", "SET", "maxmemory", str(used + 3 * 1024 * 1024))
        body = b"e" * (256 * 1024)
        ids = []
        for _ in range(30):
            ids.append(r.execute_command("ADDJOB", "ev", body, "0", "RETRY", "0"))
            fetch(r, "ev")
        assert int(info(r, "jobs")["evicted_jobs"]) > 0
        wait_kinds(directory, ids[0], ["added", "queued", "delivered", "evicted"])
        r.close()


# -- files, flushing, restarts --------------------------------------------------------------
def test_file_name_and_flush_without_traffic(tmp_path: Path) -> None:
    directory = tmp_path / "deep" / "events"  # created, parents too
    with running_node(tmp_path / "n", "--event-log", str(directory)) as node:
        r = strict_client(node)
        node_id = r.execute_command("CLUSTER", "MYID").decode()
        job_id = r.execute_command("ADDJOB", "q", "x", "0")
        # Nothing else happens on the node: the timer alone must write the events.
        wait_kinds(directory, job_id, ["added", "queued"])
        wait_until(lambda: info(r, "eventlog")["event_log_buffered"] == "0")
        names = [path.name for path in directory.iterdir()]
        assert len(names) == 1
        match = NAME_RE.match(names[0])
        assert match and match.group(2) == node_id[:8]
        r.close()
        # Nothing buffered, so no flush timer: the idle node does not wake up at all.
        before = wakeups(node)
        time.sleep(2.5)
        assert wakeups(node) - before <= 1


def wakeups(node: NodeProcess) -> int:
    """Times the node's process went to sleep and was woken (voluntary context switches)."""
    status = Path(f"/proc/{node.process.pid}/status").read_text()
    return int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]


def test_relative_directory_is_inside_the_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_node(data, "--event-log", "ev/sub") as node:
        r = strict_client(node)
        assert r.execute_command("CONFIG", "GET", "event-log") == [b"event-log", b"ev/sub"]
        job_id = r.execute_command("ADDJOB", "q", "x", "0")
        wait_kinds(data / "ev" / "sub", job_id, ["added", "queued"])
        assert info(r, "eventlog")["event_log_file"].startswith(str(data / "ev" / "sub") + "/")
        r.close()


@pytest.mark.parametrize("how", ["SHUTDOWN", "SIGTERM"])
def test_buffered_events_are_written_at_shutdown(tmp_path: Path, how: str) -> None:
    directory = tmp_path / "events"
    node = NodeProcess(tmp_path / "n", "--event-log", str(directory))
    try:
        r = strict_client(node)
        # Pipelined with the stop, so the stop comes long before the 1 s flush timer.
        pipe = r.pipeline(transaction=False)
        for i in range(50):
            pipe.execute_command("ADDJOB", "q", f"job {i}", "0")
        ids = pipe.execute()
        if how == "SHUTDOWN":
            try:
                r.execute_command("SHUTDOWN")
            except redis.ConnectionError:
                pass
        else:
            node.process.terminate()
        assert node.process.wait(10) == 0
        r.close()
    finally:
        node.stop()
    events = read_events(directory)
    assert [e["id"] for e in events] == [i.decode() for i in ids for _ in range(2)]
    assert "Conveyor is now ready to exit" in node.log_path.read_text()


def test_a_restarted_node_appends(tmp_path: Path) -> None:
    data = tmp_path / "n"
    directory = tmp_path / "events"
    with running_node(data, "--event-log", str(directory)) as node:
        r = strict_client(node)
        first = r.execute_command("ADDJOB", "q", "x", "0")
        r.close()
    before = {path.name: path.read_bytes() for path in directory.iterdir()}
    assert [e["id"] for e in read_events(directory)] == [first.decode()] * 2
    with running_node(data, "--event-log", str(directory)) as node:
        r = strict_client(node)
        second = r.execute_command("ADDJOB", "q", "y", "0")
        r.close()
    for name, content in before.items():
        assert (directory / name).read_bytes().startswith(content)  # appended, not rewritten
    assert [e["id"] for e in read_events(directory)] == [first.decode()] * 2 + [second.decode()] * 2


def test_two_nodes_share_a_directory(tmp_path: Path) -> None:
    directory = tmp_path / "events"
    with (
        running_node(tmp_path / "a", "--event-log", str(directory)) as a,
        running_node(tmp_path / "b", "--event-log", str(directory)) as b,
    ):
        ra, rb = strict_client(a), strict_client(b)
        id_a = ra.execute_command("ADDJOB", "q", "x", "0")
        id_b = rb.execute_command("ADDJOB", "q", "x", "0")
        wait_kinds(directory, id_a, ["added", "queued"])
        wait_kinds(directory, id_b, ["added", "queued"])
        names = sorted(path.name.split("-")[2] for path in directory.iterdir())
        assert names == sorted(f"{i[2:10].decode()}.jsonl" for i in (id_a, id_b))
        ra.close()
        rb.close()


def test_cluster_reset_hard_writes_under_the_new_id(tmp_path: Path) -> None:
    directory = tmp_path / "events"
    with running_node(tmp_path / "n", "--event-log", str(directory)) as node:
        r = strict_client(node)
        old = r.execute_command("ADDJOB", "q", "x", "0")
        assert r.execute_command("CLUSTER", "RESET", "HARD") == b"OK"
        new = r.execute_command("ADDJOB", "q", "y", "0")
        old_events = wait_kinds(directory, old, ["added", "queued", "deleted"])
        new_events = wait_kinds(directory, new, ["added", "queued"])
        assert {e["node"][:8] for e in old_events} == {old[2:10].decode()}
        assert {e["node"][:8] for e in new_events} == {new[2:10].decode()}
        r.close()


# -- failures ---------------------------------------------------------------------------------
def test_unwritable_directory_drops_events_but_not_jobs(tmp_path: Path) -> None:
    directory = tmp_path / "events"
    with running_node(tmp_path / "n", "--event-log", str(directory)) as node:
        r = strict_client(node)
        # A file where the directory was: opening fails whoever we run as (even root).
        shutil.rmtree(directory, ignore_errors=True)
        directory.write_text("not a directory")
        ids = [r.execute_command("ADDJOB", "q", f"x{i}", "0") for i in range(3)]
        wait_until(lambda: int(info(r, "eventlog")["event_log_dropped"]) >= 6)
        for _ in range(2):  # more failed flushes: still one warning
            more = r.execute_command("ADDJOB", "q", "more", "0")
            ids.append(more)
            dropped = int(info(r, "eventlog")["event_log_dropped"])
            wait_until(lambda d=dropped: int(info(r, "eventlog")["event_log_dropped"]) > d)
        assert node.alive()
        got = r.execute_command("GETJOB", "COUNT", "10", "FROM", "q")
        assert [job[1] for job in got] == ids
        assert r.execute_command("ACKJOB", *ids) == len(ids)
        log_text = node.log_path.read_text()
        assert log_text.count("Job-event log: cannot write") == 1
        # The directory comes back: the log writes again (and says so).
        directory.unlink()
        directory.mkdir()
        again = r.execute_command("ADDJOB", "q", "again", "0")
        wait_kinds(directory, again, ["added", "queued"])
        wait_until(lambda: "writing to" in node.log_path.read_text())
        assert info(r, "eventlog")["event_log_enabled"] == "1"
        r.close()


def test_removed_directory_is_recreated(tmp_path: Path) -> None:
    directory = tmp_path / "events"
    with running_node(tmp_path / "n", "--event-log", str(directory)) as node:
        r = strict_client(node)
        shutil.rmtree(directory)
        job_id = r.execute_command("ADDJOB", "q", "x", "0")
        wait_kinds(directory, job_id, ["added", "queued"])
        assert info(r, "eventlog")["event_log_dropped"] == "0"
        r.close()


def run_server(tmp_path: Path, *args: str, config_text: str | None = None) -> str:
    command = [sys.executable, "-m", "conveyor.cli", "server"]
    if config_text is not None:
        config = tmp_path / "node.conf"
        config.write_text(config_text)
        command.append(str(config))
    command += ["--port", "0", "--dir", str(tmp_path / "data"), *args]
    result = subprocess.run(command, capture_output=True, timeout=30)
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert "*** FATAL CONFIG FILE ERROR ***" in stderr
    return stderr


def test_bad_arguments_stop_the_node_at_startup(tmp_path: Path) -> None:
    assert "--event-log: 'event-log' takes one argument, got 0" in run_server(
        tmp_path, "--event-log"
    )
    assert "--event-log: 'event-log' takes one argument, got 2" in run_server(
        tmp_path, "--event-log", "a", "b"
    )
    assert "node.conf:2: 'event-log': 'event-log' takes one argument, got 0" in run_server(
        tmp_path, config_text="port 0\nevent-log\n"
    )
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    stderr = run_server(tmp_path, "--event-log", str(blocker))
    assert f">>> cannot use event-log directory '{blocker}': File exists" in stderr


def test_config_set_switches_and_disables(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    # Absolute paths outside the data directory: CONFIG SET needs protected configs
    # enabled for those (docs/security.md).
    with running_node(
        tmp_path / "n", "--event-log", str(first), "--enable-protected-configs", "yes"
    ) as node:
        r = strict_client(node)
        one = r.execute_command("ADDJOB", "q", "1", "0")
        assert r.execute_command("CONFIG", "SET", "event-log", str(second)) == b"OK"
        assert r.execute_command("CONFIG", "GET", "event-log") == [
            b"event-log",
            str(second).encode(),
        ]
        two = r.execute_command("ADDJOB", "q", "2", "0")
        # What was buffered went to the old directory at the switch.
        assert [e["event"] for e in events_of(first, one)] == ["added", "queued"]
        wait_kinds(second, two, ["added", "queued"])
        assert events_of(second, one) == []

        blocker = tmp_path / "a-file"
        blocker.write_text("")
        assert error_of(r, "CONFIG", "SET", "event-log", str(blocker)) == (
            f"ERR Invalid argument '{blocker}' for CONFIG SET 'event-log': "
            f"cannot use event-log directory '{blocker}': File exists"
        )
        assert r.execute_command("CONFIG", "GET", "event-log")[1] == str(second).encode()

        assert r.execute_command("CONFIG", "SET", "event-log", "") == b"OK"
        fields = info(r, "eventlog")
        assert (fields["event_log_enabled"], fields["event_log_file"]) == ("0", "")
        assert int(fields["event_log_events"]) == 4  # counted across the switches
        three = r.execute_command("ADDJOB", "q", "3", "0")
        r.execute_command("ACKJOB", one, two, three)
        r.close()
    assert events_of(first, three) == events_of(second, three) == []
    assert [e["event"] for e in events_of(second, two)] == ["added", "queued"]  # no ack


def test_disabled_by_default(tmp_path: Path) -> None:
    with running_node(tmp_path / "n") as node:
        r = strict_client(node)
        assert r.execute_command("CONFIG", "GET", "event-log") == [b"event-log", b""]
        r.execute_command("ADDJOB", "q", "x", "0")
        fields = info(r, "eventlog")
        assert fields == {
            "event_log_enabled": "0",
            "event_log_file": "",
            "event_log_events": "0",
            "event_log_bytes": "0",
            "event_log_dropped": "0",
            "event_log_buffered": "0",
        }
        r.close()
    assert not list((tmp_path / "n").glob("**/*.jsonl"))


# -- the writer on its own, with an injected clock -----------------------------------------------
def at(stamp: str) -> int:
    """ms since the epoch of a UTC 'YYYY-MM-DD HH:MM:SS'."""
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) * 1000


def job(job_id: str = "D-b9aff143-XJxhnFNEDVh4UH0oZVPH4t24-05a1", queue: bytes = b"q") -> Job:
    return Job(job_id.encode(), queue, b"body", 1, 0, 0, 0, 300)


NODE = "b9aff143" + "0" * 32


def test_writer_rotates_by_the_hour_of_each_event(tmp_path: Path) -> None:
    log = EventLog(tmp_path, NODE)
    log.record("added", job(), at("2026-11-22 06:59:59"))
    log.record("queued", job(), at("2026-11-22 07:00:00"))
    log.record("delivered", job(), at("2026-11-22 06:59:59"))  # the clock stepped back
    log.record("acked", job(), at("2026-11-22 07:00:01"))
    log.flush()
    six = (tmp_path / "events-20261122T06-b9aff143.jsonl").read_text().splitlines()
    seven = (tmp_path / "events-20261122T07-b9aff143.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in six] == ["added", "delivered"]
    assert [json.loads(line)["event"] for line in seven] == ["queued", "acked"]
    assert seven[0] == (
        '{"time_ms":1795330800000,"node":"' + NODE + '","event":"queued",'
        '"id":"D-b9aff143-XJxhnFNEDVh4UH0oZVPH4t24-05a1","queue":"q","nacks":0,'
        '"additional_deliveries":0}'
    )
    assert log.counters.events == 4
    assert log.counters.bytes == sum(p.stat().st_size for p in tmp_path.iterdir())


def test_writer_counters_and_queue_of_each_event(tmp_path: Path) -> None:
    log = EventLog(tmp_path, NODE)
    now = at("2026-11-22 07:10:00")
    fresh = job(queue=b"pairs")
    log.record("added", fresh, now)
    log.record("queued", fresh, now)
    nacked = job("D-b9aff143-AAAAAAAAAAAAAAAAAAAAAAAA-05a1")
    nacked.nacks, nacked.additional_deliveries = 3, 12
    log.record("nacked", nacked, now + 1)
    assert log.buffered() == 3
    log.flush()
    events = read_events(tmp_path)
    assert [(e["event"], e["queue"], e["nacks"], e["additional_deliveries"]) for e in events] == [
        ("added", "pairs", 0, 0),
        ("queued", "pairs", 0, 0),
        ("nacked", "q", 3, 12),
    ]
    assert [e["time_ms"] for e in events] == [now, now, now + 1]


def test_writer_writes_a_full_buffer_by_itself(tmp_path: Path) -> None:
    log = EventLog(tmp_path, NODE)
    now = at("2026-11-22 07:20:00")
    for _ in range(500):  # ~85 KB, past the ~64 KiB limit
        log.record("added", job(), now)
        log.record("queued", job(), now)
    assert not list(tmp_path.iterdir())  # a millisecond is never split
    log.record("acked", job(), now + 1)  # the next millisecond writes what was full
    assert len(read_events(tmp_path)) == 1000
    assert log.buffered() == 1


def test_writer_ends_a_torn_line_left_by_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "events-20261122T07-b9aff143.jsonl"
    path.write_bytes(b'{"time_ms":1,"node":"b9aff143')  # killed mid-write
    log = EventLog(tmp_path, NODE)
    log.record("added", job(), at("2026-11-22 07:30:00"))
    log.flush()
    lines = path.read_bytes().split(b"\n")
    assert lines[0] == b'{"time_ms":1,"node":"b9aff143'
    assert json.loads(lines[1])["event"] == "added"


def test_writer_failures_count_and_recover(tmp_path: Path) -> None:
    directory = tmp_path / "events"
    log = EventLog(directory, NODE)
    directory.rmdir()
    directory.write_text("in the way")
    log.record("added", job(), at("2026-11-22 07:40:00"))
    log.record("queued", job(), at("2026-11-22 07:40:00"))
    log.flush()  # no exception
    assert (log.failing, log.counters.dropped, log.counters.events) == (True, 2, 0)
    directory.unlink()
    log.record("acked", job(), at("2026-11-22 07:40:01"))
    log.flush()  # the directory is made again
    assert (log.failing, log.counters.dropped, log.counters.events) == (False, 2, 1)
    assert [e["event"] for e in read_events(directory)] == ["acked"]


def test_writer_names_a_new_node_id_after_flushing_the_old(tmp_path: Path) -> None:
    log = EventLog(tmp_path, NODE)
    now = at("2026-11-22 07:50:00")
    log.record("added", job(), now)
    log.set_node_id("c" * 40)
    log.record("deleted", job(), now)
    log.flush()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "events-20261122T07-b9aff143.jsonl",
        "events-20261122T07-cccccccc.jsonl",
    ]
    assert {e["node"] for e in read_events(tmp_path)} == {NODE, "c" * 40}


@pytest.mark.parametrize(
    "name", [b"", b'"', b"\\", b"\n\x00\x7f", b"\xff", "\u2028\U0001f600".encode()]
)
def test_queue_json_is_ascii_json(name: bytes) -> None:
    encoded = queue_json(name)
    assert encoded.isascii() and b"\n" not in encoded
    assert json.loads(encoded) == name.decode("utf-8", errors="replace")


_EVENT_NAMES = [
    "added", "queued", EV_ADDED_QUEUED, "delivered", "acked", "nacked", "requeued", "released",
]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(_EVENT_NAMES),
            st.integers(0, 3),  # which job
            st.integers(0, 2),  # milliseconds after the previous event
            st.sampled_from([b"q", b"other", b'"odd\n']),
            st.integers(0, 2),  # nacks
            st.integers(0, 2),  # additional deliveries
        ),
        max_size=60,
    ),
    st.integers(1, 4),
)
def test_writer_lines_match_a_plain_rendering(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[str, int, int, bytes, int, int]],
    batches: int,
) -> None:
    """Whatever the mix of events, queues, counters and milliseconds (and however it is
    cut into batches), each line is what json.dumps of the event says, in order; the
    cached heads and tails of the hot path never leak from one event to another."""
    directory = tmp_path_factory.mktemp("events")
    log = EventLog(directory, NODE)
    jobs = [job(f"D-b9aff143-{index:024d}-05a1") for index in range(4)]
    now = at("2026-11-22 07:30:00")
    events: list[Any] = []
    expected = []
    for event, which, step_ms, queue, nacks, deliveries in steps:
        now += step_ms
        if event is EV_ADDED_QUEUED:
            nacks = deliveries = 0  # a plain ADDJOB's, by definition
        events.append((event, jobs[which], now, queue, 0, nacks, deliveries))
        names = {"released": [], EV_ADDED_QUEUED: ["added", "queued"]}.get(event, [event])
        expected.extend(
            {"time_ms": now, "node": NODE, "event": name, "id": jobs[which].id.decode(),
             "queue": queue.decode(), "nacks": nacks, "additional_deliveries": deliveries}
            for name in names
        )  # fmt: skip
    size = max(1, len(events) // batches)
    for start in range(0, len(events), size):
        log.record_events(events[start : start + size])
    log.flush()
    assert read_events(directory) == expected
