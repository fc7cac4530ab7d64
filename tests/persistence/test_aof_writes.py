"""The AOF while the node runs: a failing disk (-MISCONF, then recovery by itself), CONFIG
SET appendonly, BGREWRITEAOF under writes, the automatic rewrite, INFO # Persistence.

A full disk is simulated with RLIMIT_FSIZE on the node process: past the limit write()
fails with EFBIG (Python ignores SIGXFSZ), and raising the limit again from the test
(prlimit) is the disk getting space back.
"""

from __future__ import annotations

import resource
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from conveyor.persistence.reader import read_records
from tests.persistence.helpers import held_ids, wait_for
from tests.servers import NodeProcess, running_node

FILE_LIMIT = 64 * 1024
BODY = b"x" * 2000


def limit_file_size() -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, resource.RLIM_INFINITY))

    return apply


def add_until_refused(client: redis.Redis, count: int, replies: list[object]) -> None:
    """Up to `count` ADDJOBs of BODY, each reply kept in `replies`, up to the first error
    reply (kept too). Run in a thread: a reply the node holds back blocks it."""
    for _ in range(count):
        try:
            replies.append(client.execute_command("ADDJOB", "q", BODY, 0))
        except redis.ResponseError as exc:
            replies.append(exc)
            return


def test_everysec_write_errors_give_misconf_then_recover(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path, "--appendonly", "yes", preexec_fn=limit_file_size())
    try:
        client = node.client()
        ids = []
        with pytest.raises(redis.ResponseError, match="MISCONF Errors writing to the AOF file: "):
            for _ in range(FILE_LIMIT // len(BODY) * 2):
                ids.append(client.execute_command("ADDJOB", "q", BODY, 0))
                time.sleep(0.001)  # one round per job: the write of each is its own
        assert ids, "the first jobs fit under the limit"
        info = client.info("persistence")
        assert info["aof_last_write_status"] == "err"
        with pytest.raises(redis.ResponseError, match=r"MISCONF .*File too large"):
            client.execute_command("PING")
        assert client.execute_command("QLEN", "q") == len(ids)  # reads still served
        # Space again: the node retries by itself and takes writes.
        resource.prlimit(
            node.process.pid,
            resource.RLIMIT_FSIZE,
            (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
        )
        assert wait_for(lambda: client.info("persistence")["aof_last_write_status"] == "ok")
        ids.append(client.execute_command("ADDJOB", "q", BODY, 0))
        assert "AOF write error looks solved" in node.log_path.read_text()
    finally:
        node.stop()
    with running_node(tmp_path, "--appendonly", "yes") as node:
        assert held_ids(node.client()) == set(ids)


def test_always_holds_the_reply_until_the_job_is_on_disk(tmp_path: Path) -> None:
    args = ["--appendonly", "yes", "--appendfsync", "always"]
    node = NodeProcess(tmp_path, *args, preexec_fn=limit_file_size())
    try:
        client = node.client()
        ids = [client.execute_command("ADDJOB", "q", BODY, 0) for _ in range(20)]
        assert (tmp_path / "disque.aof").stat().st_size > 20 * len(BODY)
        replies: list[object] = []

        producer = threading.Thread(
            target=add_until_refused,
            args=(node.client(socket_timeout=30), FILE_LIMIT // len(BODY), replies),
        )
        producer.start()
        other = node.client()
        assert wait_for(lambda: other.info("persistence")["aof_last_write_status"] == "err")
        # The ADDJOB whose record did not reach the file is not answered meanwhile; other
        # clients are, and their writes are refused.
        answered = len(replies)
        with pytest.raises(redis.ResponseError, match="MISCONF"):
            other.execute_command("ADDJOB", "q", BODY, 0)
        assert other.execute_command("QLEN", "q") == 20 + answered + 1
        assert producer.is_alive() and len(replies) == answered
        resource.prlimit(
            node.process.pid,
            resource.RLIMIT_FSIZE,
            (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
        )
        producer.join(30)
        assert not producer.is_alive()
        # Answered with its ID once written and synced; the next one may have met MISCONF.
        assert isinstance(replies[answered], bytes)
        ids += [reply for reply in replies if isinstance(reply, bytes)]
    finally:
        node.stop()
    with running_node(tmp_path, *args) as node:
        assert set(ids) <= held_ids(node.client())


def test_config_set_appendonly_yes_writes_the_file_from_memory(tmp_path: Path) -> None:
    with running_node(tmp_path) as node:
        client = node.client()
        ids = {client.execute_command("ADDJOB", "q", f"job {n}", 0) for n in range(500)}
        assert client.config_set("appendonly", "yes")
        assert wait_for(lambda: client.info("persistence")["aof_state"] == "on")
        ids.add(client.execute_command("ADDJOB", "q", "after", 0))
        assert client.info("persistence")["aof_last_bgrewrite_status"] == "ok"
        assert client.config_set("appendonly", "no")
        assert client.info("persistence")["aof_enabled"] == 0
        client.execute_command("ADDJOB", "q", "not persisted", 0)
    with running_node(tmp_path, "--appendonly", "yes") as node:
        assert held_ids(node.client()) == ids


def test_bgrewriteaof_under_writes_keeps_exactly_the_held_jobs(tmp_path: Path) -> None:
    args = ["--appendonly", "yes"]
    with running_node(tmp_path, *args) as node:
        client = node.client()
        pipe = client.pipeline(transaction=False)
        for n in range(20_000):
            pipe.execute_command("ADDJOB", "q", f"job {n}", 0)
        ids = pipe.execute()
        client.execute_command("ACKJOB", *ids[:5000])
        size_before = (tmp_path / "disque.aof").stat().st_size
        stop = threading.Event()

        def churn() -> None:
            worker = node.client()
            for _ in range(2000):
                if stop.is_set():
                    return
                job_id = worker.execute_command("ADDJOB", "q", "during", 0)
                if int(job_id[-1:], 16) % 2:
                    worker.execute_command("ACKJOB", job_id)

        churner = threading.Thread(target=churn)
        churner.start()
        # Two in the same read: the second meets the first in progress.
        pipe = client.pipeline(transaction=False)
        pipe.execute_command("BGREWRITEAOF")
        pipe.execute_command("BGREWRITEAOF")
        started, again = pipe.execute(raise_on_error=False)
        assert started in (b"Background append only file rewriting started", True)
        assert "already in progress" in str(again)
        assert wait_for(lambda: client.info("persistence")["aof_rewrite_in_progress"] == 0, 60)
        stop.set()
        churner.join(30)
        held = held_ids(client)
        info = client.info("persistence")
        assert info["aof_last_bgrewrite_status"] == "ok"
        assert info["aof_current_size"] < size_before
    records = list(read_records((tmp_path / "disque.aof").read_bytes()))
    assert records[0].command == b"LOADJOB"
    with running_node(tmp_path, *args) as node:
        assert held_ids(node.client()) == held


def test_the_file_is_rewritten_automatically_when_it_doubles(tmp_path: Path) -> None:
    args = ["--appendonly", "yes", "--auto-aof-rewrite-min-size", "65536"]
    with running_node(tmp_path, *args) as node:
        client = node.client()
        ids = [client.execute_command("ADDJOB", "q", BODY, 0) for _ in range(40)]
        client.execute_command("ACKJOB", *ids[:39])
        assert wait_for(lambda: client.info("persistence")["aof_last_rewrite_time_sec"] != -1)
        info = client.info("persistence")
        assert info["aof_base_size"] == info["aof_current_size"] < 2 * len(BODY)
        assert "Starting automatic rewriting of AOF on" in node.log_path.read_text()


def test_info_persistence_has_disques_fields(tmp_path: Path) -> None:
    with running_node(tmp_path, "--appendonly", "yes") as node:
        info = node.client().info("persistence")
    for field in (
        "loading",
        "aof_enabled",
        "aof_state",
        "aof_rewrite_in_progress",
        "aof_rewrite_scheduled",
        "aof_last_rewrite_time_sec",
        "aof_current_rewrite_time_sec",
        "aof_last_bgrewrite_status",
        "aof_last_write_status",
        "aof_current_size",
        "aof_base_size",
        "aof_pending_rewrite",
        "aof_buffer_length",
        "aof_rewrite_buffer_length",
        "aof_pending_bio_fsync",
        "aof_delayed_fsync",
    ):
        assert field in info, field
    assert info["aof_enabled"] == 1 and info["aof_state"] == "on"


def test_appendfsync_can_change_while_clients_write(tmp_path: Path) -> None:
    with running_node(tmp_path, "--appendonly", "yes") as node:
        client = node.client()
        ids = []
        for policy in ("always", "no", "everysec", "always"):
            assert client.config_set("appendfsync", policy)
            pipe = client.pipeline(transaction=False)
            for n in range(500):
                pipe.execute_command("ADDJOB", "q", f"{policy} {n}", 0)
            ids += pipe.execute()
            assert client.execute_command("QLEN", "q") == len(ids)
    with running_node(tmp_path, "--appendonly", "yes") as node:
        assert held_ids(node.client()) == set(ids)


def test_rewrites_under_always_and_load_keep_every_client_answered(tmp_path: Path) -> None:
    args = ["--appendonly", "yes", "--appendfsync", "always"]
    ids: list[bytes] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def produce() -> None:
        producer = node.client()
        try:
            for n in range(100_000):
                if stop.is_set():
                    return
                ids.append(producer.execute_command("ADDJOB", "q", f"job {n}", 0))
        except redis.RedisError as exc:
            failures.append(exc)

    with running_node(tmp_path, *args) as node:
        client = node.client()
        producers = [threading.Thread(target=produce) for _ in range(4)]
        for producer in producers:
            producer.start()
        # Each rewrite replaces the live file while the producers' fsyncs run on it.
        for _ in range(20):
            assert client.execute_command("BGREWRITEAOF")
            assert wait_for(lambda: client.info("persistence")["aof_rewrite_in_progress"] == 0)
            assert client.ping()
        stop.set()
        for producer in producers:
            producer.join(30)
        assert not failures
        assert client.info("persistence")["aof_last_bgrewrite_status"] == "ok"
        # Every replaced file was closed once its last fsync was over: none is left open.
        assert wait_for(lambda: not replaced_files_open(node.process.pid))
    with running_node(tmp_path, *args) as node:
        assert set(ids) <= held_ids(node.client())


def replaced_files_open(pid: int) -> list[str]:
    fds = Path(f"/proc/{pid}/fd")
    links = []
    for fd in fds.iterdir():
        try:
            links.append(str(fd.readlink()))
        except OSError:  # closed meanwhile
            pass
    return [link for link in links if ".aof" in link and link.endswith("(deleted)")]


def test_appendonly_no_answers_the_clients_a_failing_disk_held_back(tmp_path: Path) -> None:
    # The usual answer to MISCONF: stop persisting. The client whose ADDJOB was held
    # because its record could not be written gets its reply and is read again.
    args = ["--appendonly", "yes", "--appendfsync", "always"]
    node = NodeProcess(tmp_path, *args, preexec_fn=limit_file_size())
    try:
        producer = node.client(socket_timeout=30)
        replies: list[object] = []

        adding = threading.Thread(
            target=add_until_refused, args=(producer, FILE_LIMIT // len(BODY) * 2, replies)
        )
        adding.start()
        other = node.client()
        assert wait_for(lambda: other.info("persistence")["aof_last_write_status"] == "err")
        held = len(replies)
        assert adding.is_alive()
        assert other.config_set("appendonly", "no")
        adding.join(30)
        assert not adding.is_alive(), "the held ADDJOB was never answered"
        job_id = replies[held]
        assert isinstance(job_id, bytes) and job_id.startswith(b"D-")
        assert other.execute_command("SHOW", job_id) is not None
        # Its connection is read again.
        assert producer.execute_command("QLEN", "q") == other.execute_command("QLEN", "q")
    finally:
        node.stop()


def test_always_exits_when_an_fsync_fails(tmp_path: Path) -> None:
    # On /dev/null writes succeed and fdatasync fails (EINVAL): a disk that lost what
    # it was given. Linux may mark such pages clean, so a later fsync that succeeds
    # would prove nothing: as Redis, the node exits rather than acknowledge the job.
    (tmp_path / "disque.aof").symlink_to("/dev/null")
    node = NodeProcess(tmp_path, "--appendonly", "yes", "--appendfsync", "always")
    try:
        with socket.create_connection(("127.0.0.1", node.port), timeout=30) as sock:
            sock.sendall(b"ADDJOB q body 0\r\n")
            assert node.process.wait(30) == 1
            try:
                reply = sock.recv(4096)
            except ConnectionResetError:
                reply = b""
        assert reply == b""  # never answered
        assert (
            "Can't persist AOF for fsync error when the AOF fsync policy is 'always'"
            in node.log_path.read_text()
        )
    finally:
        node.stop()


def test_everysec_reports_a_failed_fsync_and_goes_on(tmp_path: Path) -> None:
    (tmp_path / "disque.aof").symlink_to("/dev/null")
    with running_node(tmp_path, "--appendonly", "yes", "--appendfsync", "everysec") as node:
        client = node.client()
        assert client.execute_command("ADDJOB", "q", "body", 0).startswith(b"D-")
        assert wait_for(lambda: client.info("persistence")["aof_last_write_status"] == "err")
        assert client.execute_command("QLEN", "q") == 1
        assert node.alive()
