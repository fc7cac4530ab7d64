"""`Client` against a real node: every method, its reply shape and its effect."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis

from conveyor.client import Client, Hello, Job, NodeInfo
from tests.servers import NodeProcess, running_node

UNKNOWN_ID = "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"


def test_add_job_returns_an_id_and_queues_the_job(client: Client, raw: redis.Redis) -> None:
    job_id = client.add_job("q", b"hello")
    assert isinstance(job_id, str) and len(job_id) == 40 and job_id.startswith("D-")
    assert client.qlen("q") == 1
    assert raw.execute_command("QPEEK", "q", 1) == [[b"q", job_id.encode(), b"hello"]]


def test_add_job_options_reach_the_node(client: Client) -> None:
    job_id = client.add_job(
        "q", "text body", replicate=1, delay=5, retry=7, ttl=100, maxlen=10, timeout_ms=100
    )
    shown = client.show(job_id)
    assert shown is not None
    assert (shown["repl"], shown["delay"], shown["retry"]) == (1, 5, 7)
    assert 0 < shown["ttl"] <= 100
    assert shown["body"] == b"text body"
    assert client.qlen("q") == 0  # delayed
    async_id = client.add_job("q", b"x", asynchronous=True, retry=0)
    assert async_id.endswith("0") and client.qlen("q") == 1  # RETRY 0: even TTL digits


def test_get_jobs_returns_typed_jobs(client: Client) -> None:
    first = client.add_job("q1", b"one")
    second = client.add_job("q2", "two")
    jobs = client.get_jobs(["q1", "q2"], count=5, nohang=True)
    assert jobs == [Job("q1", first, b"one"), Job("q2", second, b"two")]
    assert jobs[0].nacks is None and jobs[0].additional_deliveries is None
    assert jobs[1].body_text() == "two"
    with pytest.raises(AttributeError):
        jobs[0].body = b"changed"  # type: ignore[misc]


def test_get_jobs_with_counters(client: Client) -> None:
    job_id = client.add_job("q", b"x")
    job = client.get_job("q", with_counters=True)
    assert job is not None and (job.id, job.nacks, job.additional_deliveries) == (job_id, 0, 0)
    assert client.nack(job) == 1
    again = client.get_job("q", with_counters=True)
    assert again is not None and again.nacks == 1
    assert client.enqueue(again) == 1
    third = client.get_job("q", with_counters=True)
    assert third is not None and third.additional_deliveries == 1


def test_get_jobs_nohang_and_timeout_return_empty(client: Client) -> None:
    assert client.get_jobs("empty", nohang=True) == []
    assert client.get_job("empty", nohang=True) is None
    started = time.monotonic()
    assert client.get_jobs("empty", timeout_ms=200) == []
    assert 0.15 < time.monotonic() - started < 3


def test_get_jobs_needs_a_queue(client: Client) -> None:
    with pytest.raises(ValueError):
        client.get_jobs([])


def test_blocking_get_outlives_the_socket_timeout(node: NodeProcess, raw: redis.Redis) -> None:
    """socket_timeout=0.3 must not cut a GETJOB that waits longer, with or without TIMEOUT."""
    with Client([f"127.0.0.1:{node.port}"], socket_timeout=0.3) as short:
        started = time.monotonic()
        assert short.get_jobs("slow", timeout_ms=1000) == []
        assert time.monotonic() - started >= 0.9

        timer = threading.Timer(1.0, raw.execute_command, ("ADDJOB", "slow", "late", "0"))
        timer.start()
        try:
            job = short.get_job("slow")  # no timeout: blocks until the job comes
        finally:
            timer.join()
        assert job is not None and job.body == b"late"
        assert short.ping() is True  # the connection pool is still healthy


def test_ack_fast_ack_and_del_job(client: Client) -> None:
    a, b, c = (client.add_job("q", str(n)) for n in range(3))
    assert client.ack(a) == 1
    assert client.ack(a) == 0
    assert client.show(a) is None
    assert client.fast_ack(b, UNKNOWN_ID) == 1
    assert client.del_job(c) == 1
    assert client.qlen("q") == 0
    assert client.ack() == 0


def test_nack_with_delay(client: Client) -> None:
    client.add_job("q", b"x")
    job = client.get_job("q")
    assert job is not None
    assert client.nack(job.id, delay=30) == 1
    assert client.qlen("q") == 0  # back later, not now
    shown = client.show(job)
    assert shown is not None and shown["nacks"] == 1


def test_working_returns_retry(client: Client) -> None:
    job_id = client.add_job("q", b"x", retry=42)
    assert client.get_job("q") is not None
    assert client.working(job_id) == 42


def test_enqueue_and_dequeue(client: Client) -> None:
    job_id = client.add_job("q", b"x")
    assert client.dequeue(job_id) == 1
    assert client.qlen("q") == 0
    assert client.dequeue(job_id) == 0
    assert client.enqueue(job_id) == 1
    assert client.qlen("q") == 1


def test_show_gives_natural_python_values(client: Client) -> None:
    job_id = client.add_job("q", b"\x00\xffbody")
    shown = client.show(job_id)
    assert shown is not None
    assert list(shown) == [
        "id", "queue", "state", "repl", "ttl", "ctime", "delay", "retry", "nacks",
        "additional-deliveries", "nodes-delivered", "nodes-confirmed",
        "next-requeue-within", "next-awake-within", "body",
    ]  # fmt: skip
    assert shown["id"] == job_id and shown["queue"] == "q" and shown["state"] == "queued"
    assert shown["body"] == b"\x00\xffbody"
    assert isinstance(shown["ctime"], int) and shown["nacks"] == 0
    assert shown["nodes-delivered"] == [client.node_id]
    assert client.show(UNKNOWN_ID) is None


def test_qlen_qstat_qpeek(client: Client) -> None:
    assert client.qlen("nothing") == 0
    assert client.qstat("nothing") is None
    assert client.qpeek("nothing", 3) == []
    ids = [client.add_job("q", f"job{n}") for n in range(3)]
    stat = client.qstat("q")
    assert stat is not None
    assert stat["name"] == "q" and stat["len"] == 3 and stat["pause"] == "none"
    assert stat["import-from"] == [] and stat["jobs-in"] == 3
    assert [job.id for job in client.qpeek("q", 2)] == ids[:2]
    assert [job.id for job in client.qpeek("q", -1)] == ids[-1:]
    assert client.qpeek("q", 1)[0].body == b"job0"


def test_pause(client: Client) -> None:
    assert client.pause("q", "in") == "in"
    assert client.pause("q", "out") == "out"
    assert client.pause("q", "state") == "out"
    assert client.pause("q") == "out"  # no option: just the state
    assert client.pause("q", "all") == "all"
    assert client.pause("q", "none") == "none"
    with pytest.raises(ValueError):
        client.pause("q", "sideways")


def test_info_is_a_dict_of_natural_values(client: Client) -> None:
    client.add_job("q", b"x")
    info = client.info()
    assert info["registered_jobs"] == 1
    assert info["registered_queues"] == 1
    assert isinstance(info["tcp_port"], int)
    assert set(client.info("jobs")) >= {"registered_jobs"}
    assert "tcp_port" not in client.info("jobs")
    everything = client.info("all")
    assert everything["cmdstat_addjob"]["calls"] >= 1
    assert client.info("nosuchsection") == {}


def test_hello_and_ping(client: Client, node: NodeProcess, raw: redis.Redis) -> None:
    hello = client.hello()
    my_id = raw.execute_command("CLUSTER", "MYID").decode()
    assert hello == Hello(1, my_id, [NodeInfo(my_id, "127.0.0.1", node.port, 1)])
    assert client.node_id == my_id and client.nodes == hello.nodes
    assert client.ping() is True


def test_scan_queues_over_many_pages(client: Client) -> None:
    names = {f"queue-{n}" for n in range(25)}
    for name in names:
        client.add_job(name, b"x")
    client.add_job("queue-0", b"y")
    assert set(client.scan_queues(count=4)) == names
    assert set(client.scan_queues(count=3, minlen=2)) == {"queue-0"}
    assert set(client.scan_queues(count=3, maxlen=1)) == names - {"queue-0"}


def test_scan_jobs_over_many_pages(client: Client) -> None:
    queued = {client.add_job("a", str(n)) for n in range(23)}
    other = {client.add_job("b", str(n)) for n in range(4)}
    fetched = {job.id for job in client.get_jobs("b", count=2)}
    assert set(client.scan_jobs(count=5)) == queued | other
    assert set(client.scan_jobs(queue="a", count=5)) == queued
    assert set(client.scan_jobs(queue="b", states="active", count=1)) == fetched
    assert set(client.scan_jobs(states=["active", "queued"], count=2)) == queued | other
    assert list(client.scan_jobs(states="acked")) == []


def test_jobs_accept_job_objects(client: Client) -> None:
    client.add_job("q", b"x")
    job = client.get_job("q")
    assert job is not None
    assert client.working(job) > 0
    assert client.ack(job) == 1


def test_execute_command_passthrough(client: Client) -> None:
    assert client.execute_command("QLEN", "q") == 0
    assert client.execute_command("PING", "hi") == b"hi"


def test_context_manager_closes(node: NodeProcess) -> None:
    with Client([f"127.0.0.1:{node.port}"]) as client:
        assert client.ping()
        assert client.address == f"127.0.0.1:{node.port}"
    from conveyor.client import ConveyorError

    with pytest.raises(ConveyorError):
        client.ping()


def test_from_url(node: NodeProcess) -> None:
    with Client.from_url(f"disque://127.0.0.1:{node.port}?socket_timeout=2") as client:
        assert client.ping()
        assert client.configured_nodes == [f"127.0.0.1:{node.port}"]


def test_default_node_is_localhost_7711() -> None:
    client = Client()
    assert client.configured_nodes == ["127.0.0.1:7711"]
    assert client.address is None and client.node_id is None
    client.close()


def test_threads_share_a_client(client: Client) -> None:
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for index in range(20):
                client.add_job("threads", f"{n}-{index}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert errors == []
    assert client.qlen("threads") == 80


def test_flushall_answers_a_blocked_get_with_nothing(tmp_path: Path) -> None:
    with running_node(tmp_path / "node") as fresh:
        address = [f"127.0.0.1:{fresh.port}"]
        with Client(address) as consumer, Client(address) as admin:
            results: list[object] = []

            def wait() -> None:
                try:
                    results.append(consumer.get_jobs("never", timeout_ms=3000))
                except Exception as exc:
                    results.append(exc)

            thread = threading.Thread(target=wait)
            thread.start()
            time.sleep(0.3)
            started = time.monotonic()
            try:
                assert admin.execute_command("DEBUG", "FLUSHALL") == b"OK"
            finally:
                thread.join(5)
            assert results == [[]]
            assert time.monotonic() - started < 2  # answered by FLUSHALL, not by TIMEOUT
