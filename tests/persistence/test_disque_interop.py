"""AOF interop with C Disque, both ways, with real processes.

A user migrating between Disque and Conveyor moves the AOF: a file written by one must
load into the other with the same jobs. Each test runs one scenario on an *origin*
server (Conveyor or Disque, `appendonly yes`, `appendfsync always`), stops it, then
starts a Disque and a Conveyor node on copies of the file it wrote and compares SHOW of
every job on the two loaders (they read the same bytes, so they must agree field by
field) and against what the origin held before it stopped.

The loaders get the origin's node ID (a seeded nodes.conf), as a node restarted in place
has, or a fresh one, as a node moved to a new machine may: the serialized jobs list the
nodes that may hold a copy, and Disque's LOADJOB silently drops the node names it does not
know (after-restart.json's "fresh node ID" run shows nodes-delivered empty). Both loaders
always get the same identity, so they must agree either way.

Needs a disque-server binary: DISQUE_SERVER=/path/to/disque-server (docs/persistence.md
says how to build one). No short DELAY/RETRY/TTL is used, so no job changes state while
the snapshots are taken.
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from conveyor.core.codec import decode_job
from conveyor.persistence.check import analyze
from conveyor.persistence.reader import AofRecord, read_records
from tests.conftest import free_port
from tests.servers import NodeProcess

DISQUE_SERVER = os.environ.get("DISQUE_SERVER", "")
pytestmark = pytest.mark.skipif(
    not DISQUE_SERVER,
    reason="C Disque interop: set DISQUE_SERVER to a disque-server binary to run these",
)

AOF = "disque.aof"
BIG_BODY = bytes(range(256)) * 40  # 10 KB, every byte value
BIN_BODY = b"\x00\x01\x02\r\n\xff\xfe\x80 binary \x00\r\n\x7f\xc3\xa9end\x00"
BIN_QUEUE = b"bin\x00q\xff\r\n \x80"

# label, queue, body, ADDJOB options
JOBS: list[tuple[str, bytes, bytes, tuple[object, ...]]] = [
    ("ascii", b"q:ascii", b"hello world", ()),
    ("empty", b"q:ascii", b"", ()),
    ("binary", b"q:ascii", BIN_BODY, ()),
    ("10kb", b"q:big", BIG_BODY, ()),
    ("binqueue", BIN_QUEUE, b"binary queue name", ()),
    ("delay", b"q:delay", b"delayed an hour", ("DELAY", 3600)),
    ("amo-fetched", b"q:amo", b"at most once, fetched", ("RETRY", 0)),
    ("amo-queued", b"q:amo", b"at most once, left queued", ("RETRY", 0)),
    ("retry", b"q:retry", b"retry 600", ("RETRY", 600)),
    ("ttl", b"q:ttl", b"ttl 3600", ("TTL", 3600)),
    ("mix", b"q:mix", b"delay+retry+ttl", ("DELAY", 1800, "RETRY", 900, "TTL", 7200)),
    *[(f"w{n}", b"q:work", b"work %d" % n, ()) for n in range(1, 7)],
]
QUEUES = sorted({queue for _, queue, _, _ in JOBS})
ACKED = ("w1", "w4")  # w1 after GETJOB (active), w4 still queued: two DELJOB records
# Compared between the two loaders; ttl separately, as an absolute expiry time.
FIELDS = (
    "id", "queue", "state", "repl", "ctime", "delay", "retry", "nacks",
    "additional-deliveries", "nodes-delivered", "body",
)  # fmt: skip
# What the file must carry over from the origin whatever the loader does with states.
KEPT = ("id", "queue", "repl", "ctime", "delay", "retry", "body")


@dataclass
class Snapshot:
    """SHOW of every job on one server, each with the unix times just before and after."""

    server: str  # "disque" or "conveyor": they round SHOW's ttl differently
    jobs: dict[str, tuple[float, float, dict[str, Any] | None]]

    def present(self) -> set[str]:
        return {label for label, (_, _, shown) in self.jobs.items() if shown is not None}

    def shown(self) -> list[dict[str, Any]]:
        return [shown for _, _, shown in self.jobs.values() if shown is not None]


def run_scenario(client: redis.Redis) -> dict[str, bytes]:
    """The same commands on either server; returns label -> job ID."""
    ids: dict[str, bytes] = {}
    for label, queue, body, options in JOBS:
        ids[label] = client.execute_command("ADDJOB", queue, body, 0, *options)
    fetched = client.execute_command("GETJOB", "COUNT", 3, "FROM", "q:work")
    assert [job[1] for job in fetched] == [ids["w1"], ids["w2"], ids["w3"]]
    fetched = client.execute_command("GETJOB", "FROM", "q:amo")
    assert fetched[0][1] == ids["amo-fetched"]
    assert client.execute_command("ACKJOB", ids["w1"], ids["w4"]) == 2
    assert client.execute_command("NACK", ids["w2"]) == 1
    client.execute_command("WORKING", ids["w3"])
    return ids


def show(client: redis.Redis, job_id: bytes) -> dict[str, Any] | None:
    reply = client.execute_command("SHOW", job_id)
    if reply is None:
        return None
    fields = {key.decode(): value for key, value in zip(reply[::2], reply[1::2], strict=True)}
    for key in ("id", "state"):
        fields[key] = fields[key].decode()
    fields["nodes-delivered"] = sorted(fields["nodes-delivered"])
    return fields


def snapshot(server: str, client: redis.Redis, ids: dict[str, bytes]) -> Snapshot:
    jobs = {}
    for label, job_id in ids.items():
        before = time.time()
        shown = show(client, job_id)
        jobs[label] = (before, time.time(), shown)
    return Snapshot(server, jobs)


def qlens(client: redis.Redis) -> dict[bytes, int]:
    return {queue: client.execute_command("QLEN", queue) for queue in QUEUES}


def wait_loaded(client: redis.Redis, what: str, log: Path) -> None:
    # INFO answers while loading (-LOADING for the rest), on both servers.
    for _ in range(600):
        if client.info("persistence").get("loading") == 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} still loading after 30 s:\n{log.read_text(errors='replace')}")


# -------------------------------------------------------------------------- servers


def free_disque_port() -> int:
    """A free client port whose cluster bus port (+10000, fixed in Disque) is free too."""
    for _ in range(100):
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair (p, p+10000) on 127.0.0.1")


def seed_node_id(data_dir: Path, node_id: str | None, port: int) -> None:
    # The line format both servers read: "<id> <ip:port> myself <ping> <pong> connected".
    data_dir.mkdir(parents=True, exist_ok=True)
    if node_id is not None:
        (data_dir / "nodes.conf").write_text(f"{node_id} 127.0.0.1:{port} myself 0 0 connected\n")


@contextmanager
def disque(data_dir: Path, node_id: str | None, enqueue_once: str) -> Iterator[redis.Redis]:
    port = free_disque_port()
    seed_node_id(data_dir, node_id, port)
    log = data_dir / "disque.log"
    command = [
        DISQUE_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data_dir),
        "--logfile", str(log), "--appendonly", "yes", "--appendfilename", AOF,
        "--appendfsync", "always", "--aof-enqueue-jobs-once", enqueue_once,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=data_dir, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    client = redis.Redis(host="127.0.0.1", port=port, protocol=2, socket_timeout=10)
    try:
        for _ in range(200):
            if process.poll() is not None:
                raise AssertionError(f"disque-server exited:\n{_tail(log)}")
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        else:
            raise AssertionError(f"disque-server did not answer PING:\n{_tail(log)}")
        wait_loaded(client, "disque-server", log)
        yield client
    finally:
        client.close()
        _stop(process)


@contextmanager
def conveyor(data_dir: Path, node_id: str | None, enqueue_once: str) -> Iterator[redis.Redis]:
    # NodeProcess picks its port when it starts; nodes.conf only needs the ID, not the port.
    seed_node_id(data_dir, node_id, 0)
    args = ("--appendonly", "yes", "--appendfsync", "always")
    node = NodeProcess(data_dir, *args, "--aof-enqueue-jobs-once", enqueue_once)
    client = node.client()
    try:
        wait_loaded(client, "conveyor node", node.log_path)
        yield client
    finally:
        client.close()
        node.stop()


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()  # Disque fsyncs the AOF on SIGTERM
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else ""


SERVERS = {"disque": disque, "conveyor": conveyor}


# -------------------------------------------------------------------------- comparisons


# More than a kernel tick (4 ms at HZ=250, 10 ms at HZ=100): how far time(NULL) may lag.
COARSE_CLOCK_LAG_S = 0.02


def expiry_window(server: str, before: float, after: float, ttl: int) -> tuple[float, float]:
    """Where the job's absolute expiry (unix seconds) can be, given SHOW's ttl.

    Both answer etime - now in whole seconds, so the ttl read between `before` and `after`
    puts the expiry between these two seconds. Disque's now is time(NULL), which Linux
    reads from the coarse clock: it turns to the next second up to a tick (a few ms) after
    time.time() does, so just after a second began it may still give the one before.
    """
    if server == "disque":
        before -= COARSE_CLOCK_LAG_S
    return ttl + math.floor(before), ttl + math.floor(after)


def assert_same_jobs(
    left: Snapshot, right: Snapshot, fields: tuple[str, ...], slack_s: float = 0.0
) -> None:
    """The same jobs, equal in `fields`, expiring at the same second (give or take slack_s)."""
    assert left.present() == right.present()
    for label in sorted(left.present()):
        t0, t1, a = left.jobs[label]
        u0, u1, b = right.jobs[label]
        assert a is not None and b is not None
        assert {f: a[f] for f in fields} == {f: b[f] for f in fields}, label
        lo_a, hi_a = expiry_window(left.server, t0, t1, a["ttl"])
        lo_b, hi_b = expiry_window(right.server, u0, u1, b["ttl"])
        assert max(lo_a, lo_b) <= min(hi_a, hi_b) + slack_s, (label, a["ttl"], b["ttl"])


@pytest.mark.parametrize("identity", ["same-id", "fresh-id"])
@pytest.mark.parametrize("enqueue_once", ["no", "yes"])
@pytest.mark.parametrize("origin", ["conveyor", "disque"])
def test_aof_written_by_one_loads_into_the_other(
    tmp_path: Path, origin: str, enqueue_once: str, identity: str
) -> None:
    if not os.access(DISQUE_SERVER, os.X_OK):
        pytest.fail(f"DISQUE_SERVER={DISQUE_SERVER!r} is not an executable file")
    with SERVERS[origin](tmp_path / "origin", None, "no") as client:
        node_id = client.execute_command("CLUSTER", "MYID").decode()
        ids = run_scenario(client)
        before = snapshot(origin, client, ids)
    written = (tmp_path / "origin" / AOF).read_bytes()
    check = analyze(written)
    assert check.error is None, str(check.error)
    # 17 LOADJOBs, 2 DELJOBs at least (a writer may log more changes than Disque does).
    assert (check.loadjobs >= len(JOBS), check.deljobs >= len(ACKED)) == (True, True)

    loaded: dict[str, tuple[Snapshot, dict[bytes, int]]] = {}
    for name, server in SERVERS.items():
        data_dir = tmp_path / f"load-{name}"
        data_dir.mkdir()
        shutil.copyfile(tmp_path / "origin" / AOF, data_dir / AOF)
        seeded = node_id if identity == "same-id" else None
        with server(data_dir, seeded, enqueue_once) as client:
            loaded[name] = (snapshot(name, client, ids), qlens(client))

    (on_disque, qlen_disque), (on_conveyor, qlen_conveyor) = loaded["disque"], loaded["conveyor"]
    assert_same_jobs(on_disque, on_conveyor, FIELDS)
    assert qlen_disque == qlen_conveyor
    # Nothing lost, nothing resurrected: the acked jobs are gone, the others kept as added.
    assert set(ids) - on_conveyor.present() == set(ACKED)
    # The file keeps whole seconds: a Conveyor origin's millisecond expiry is cut to one.
    assert_same_jobs(before, on_conveyor, KEPT, slack_s=1.0)
    # A loader that is not the writer knows no node named in the jobs, and drops them.
    delivered = [node_id.encode()] if identity == "same-id" else []
    assert all(shown["nodes-delivered"] == delivered for shown in on_conveyor.shown())
    if enqueue_once == "no":
        # A plain restart: every job comes back active, waiting for its retry.
        assert {shown["state"] for shown in on_conveyor.shown()} == {"active"}
        assert set(qlen_conveyor.values()) == {0}


def test_both_write_the_same_records(tmp_path: Path) -> None:
    """The same commands give record for record the same file on both, up to IDs and times."""
    if not os.access(DISQUE_SERVER, os.X_OK):
        pytest.fail(f"DISQUE_SERVER={DISQUE_SERVER!r} is not an executable file")
    files: dict[str, list[tuple[object, ...]]] = {}
    for name, server in SERVERS.items():
        with server(tmp_path / name, None, "no") as client:
            labels = {job_id: label for label, job_id in run_scenario(client).items()}
        files[name] = [
            shape(record, labels) for record in read_records((tmp_path / name / AOF).read_bytes())
        ]
    assert files["conveyor"] == files["disque"]
    assert len(files["disque"]) == len(JOBS) + len(ACKED)
    assert all(item[6] for item in files["disque"] if item[0] == "LOADJOB")  # etime_ok


def expected_ttl(label: str) -> int:
    options = next(options for name, _, _, options in JOBS if name == label)
    return int(str(options[options.index("TTL") + 1])) if "TTL" in options else 86400


def shape(record: AofRecord, labels: dict[bytes, str]) -> tuple[object, ...]:
    """What a record says, minus what differs between two runs (IDs, clocks, node name)."""
    if record.command.upper() == b"DELJOB":
        return ("DELJOB", labels[record.argument])
    job, _ = decode_job(record.argument)
    label = labels[job.id]
    # etime is ADDJOB's whole second + TTL (Disque's cached second may lag ctime's by one).
    etime_ok = job.etime - job.ctime // 1_000_000_000 - expected_ttl(label) in (-1, 0)
    return (
        "LOADJOB", label, job.state, job.gc_retry, job.flags, job.repl, etime_ok, job.delay,
        job.retry, job.nacks, job.additional_deliveries, job.queue, job.body, len(job.nodes),
    )  # fmt: skip


def test_check_aof_agrees_with_disque_check_aof(tmp_path: Path) -> None:
    """Where the file is cut or its framing damaged, both tools keep the same prefix."""
    tool = Path(DISQUE_SERVER).with_name("disque-check-aof")
    if not os.access(tool, os.X_OK):
        pytest.skip(f"no disque-check-aof next to {DISQUE_SERVER}")
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "disque_wire"
    original = (fixture / "appendonly.aof").read_bytes()
    damaged = [original[:cut] for cut in range(1, len(original), 97)]
    for offset, byte in ((0, b"#"), (10901, b"+"), (10905, b"x"), (14508 + 2, b"5")):
        damaged.append(original[:offset] + byte + original[offset + 1 :])
    path = tmp_path / "damaged.aof"
    for data in damaged:
        path.write_bytes(data)
        ours = analyze(data)
        theirs = subprocess.run([tool, path], capture_output=True, text=True, timeout=30)
        assert f"ok_up_to={ours.ok_up_to}," in theirs.stdout, (len(data), theirs.stdout)
