"""Runs of pipelined ADDJOBs (conveyor/node/addjob_runs.py): gathered in read order, and
answered exactly as the same requests are one by one, on real processes."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from conveyor.node.addjob_runs import RUN_MAX_JOBS, AddJobRun, Plan, gather_runs
from conveyor.node.cmd_jobs import parse_addjob
from conveyor.node.commands import COMMANDS
from conveyor.node.connection import TURN_REQUESTS
from conveyor.node.deferred import ADDJOB_SPELLINGS, MAX_OUTSTANDING
from conveyor.protocol.requests import ProtocolError
from tests.cluster.test_cluster_nodes import form
from tests.cluster.test_replication import holders, show
from tests.servers import NodeProcess

JOB_ID = re.compile(rb"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")


def _plan_all(first: list[bytes]) -> Plan:
    """Every run planned (the real planner asks the node: see the tests on processes)."""
    return COMMANDS[0], parse_addjob(first)


_requests = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from([b"ADDJOB", b"addjob", b"AddJob"]),
            st.sampled_from([b"q", b"r"]),
            st.just(b"body"),
            st.sampled_from([(b"0",), (b"5000", b"ASYNC"), (b"5000", b"REPLICATE", b"2")]),
        ).map(lambda parts: [parts[0], parts[1], parts[2], *parts[3]]),
        st.just([b"ADDJOB", b"q", b"body"]),  # too short: the command table answers
        st.just([b"PING"]),
    ),
    max_size=3 * RUN_MAX_JOBS,
)


@given(_requests)
def test_runs_keep_every_request_in_order_and_gather_all_they_can(
    requests: list[list[bytes]],
) -> None:
    items = list(gather_runs(iter(requests), _plan_all))
    # Unplanned, a run's requests come one by one, as they were.
    assert list(gather_runs(iter(requests), lambda first: None)) == requests
    flat = [r for item in items for r in (item if type(item) is AddJobRun else [item])]
    assert flat == requests
    for index, item in enumerate(items):
        if type(item) is not AddJobRun:
            # Bare: not an ADDJOB as clients spell it, or too short to carry options.
            assert item[0] not in ADDJOB_SPELLINGS or len(item) < 4
            continue
        assert 1 <= len(item) <= RUN_MAX_JOBS
        assert all(r[0] in ADDJOB_SPELLINGS and r[3:] == item[0][3:] for r in item)
        following = items[index + 1] if index + 1 < len(items) else None
        if type(following) is AddJobRun:
            # Two runs in a row: the first was full, or the options changed.
            assert len(item) == RUN_MAX_JOBS or following[0][3:] != item[0][3:]


def test_a_protocol_error_comes_after_the_run_gathered_before_it() -> None:
    def read() -> Iterator[list[bytes]]:
        yield [b"ADDJOB", b"q", b"a", b"0"]
        yield [b"ADDJOB", b"q", b"b", b"0"]
        raise ProtocolError("Protocol error: invalid bulk length")

    runs = gather_runs(read(), _plan_all)
    assert next(runs) == [[b"ADDJOB", b"q", b"a", b"0"], [b"ADDJOB", b"q", b"b", b"0"]]
    with pytest.raises(ProtocolError, match="invalid bulk length"):
        next(runs)


def test_a_read_dropped_with_a_run_held_closes_quietly() -> None:
    runs = gather_runs(iter([[b"ADDJOB", b"q", b"a", b"0"], [b"PING"]]), _plan_all)
    assert next(runs) == [[b"ADDJOB", b"q", b"a", b"0"]]
    runs.close()  # a connection lost between turns: no yield from a closing generator


def _mixed_pipeline(spelling: str, queue: str) -> list[tuple[str, ...]]:
    """Runs of every kind, errors on some of their jobs, mostly behind owed replies (the
    first jobs wait for their copies while the rest of the read runs)."""
    sync = ("5000", "REPLICATE", "3")
    return [
        *[(spelling, queue, f"s{n}", *sync) for n in range(4)],
        *[(spelling, queue, f"a{n}", *sync, "ASYNC") for n in range(3)],
        *[(spelling, queue, "bad", "5000", "REPLICATE", "0") for _ in range(2)],
        # One run, every other job for a paused queue: errors between owed replies.
        *[(spelling, f"{queue}-paused" if n % 2 else queue, f"p{n}", *sync) for n in range(4)],
        *[(spelling, queue, "late", "5000", "DELAY", "10", "TTL", "5") for _ in range(2)],
        (spelling, queue, "r0", *sync, "RETRY", "0"),
        (spelling, f"{queue}-full", "m", *sync, "MAXLEN", "1"),
        *[(spelling, queue, f"d{n}", "0") for n in range(2)],
        (spelling, queue, "short"),
        (spelling, queue, "last", *sync),
        # Behind replies still owed, another command waits for them, and what follows it.
        ("QLEN", f"{queue}-full"),
        *[(spelling, queue, f"after{n}", *sync) for n in range(2)],
    ]


def _run_pipeline(node: NodeProcess, spelling: str, queue: str) -> list[object]:
    client = node.client()
    client.execute_command("PAUSE", f"{queue}-paused", "in")
    for n in range(2):
        client.execute_command("ADDJOB", f"{queue}-full", f"f{n}", "5000", "REPLICATE", "1")
    pipe = client.pipeline(transaction=False)
    for request in _mixed_pipeline(spelling, queue):
        pipe.execute_command(*request)
    replies = pipe.execute(raise_on_error=False)
    normal: list[object] = []
    for reply in replies:
        if isinstance(reply, bytes) and JOB_ID.match(reply):
            normal.append("job ID")
        elif isinstance(reply, Exception):
            normal.append(str(reply))
        else:
            normal.append(reply)
    return normal


@pytest.fixture
def three(tmp_path: Path, cluster: list[NodeProcess]) -> list[NodeProcess]:
    """Three nodes that know each other (stopped by the `cluster` fixture)."""
    form(tmp_path, cluster, 3)
    return cluster


def _addjob_calls(node: NodeProcess) -> int:
    stats = node.client().info("commandstats")
    return int(stats["cmdstat_addjob"]["calls"]) if "cmdstat_addjob" in stats else 0


def _without_err(answers: list[object]) -> list[object]:
    """Error texts without their "ERR " (which redis-py drops and hiredis keeps)."""
    return [a.removeprefix("ERR ") if isinstance(a, str) else a for a in answers]


def check_same_answers(origin: NodeProcess, run: Callable[[str, str], list[object]]) -> None:
    """`run(spelling, queue)` sends the mixed requests: spelled ADDJOB (gathered) and
    AddJob (never gathered: clients spell it ADDJOB or addjob, so it runs request by
    request through the command table), with the same answers and command counts."""
    calls = _addjob_calls(origin)
    gathered = _without_err(run("ADDJOB", "g"))
    gathered_calls = _addjob_calls(origin) - calls
    one_by_one = _without_err(run("AddJob", "o"))
    assert gathered == one_by_one
    assert _addjob_calls(origin) - calls - gathered_calls == gathered_calls
    assert gathered.count("job ID") == 4 + 3 + 2 + 2 + 1 + 2
    assert "PAUSED Queue paused in input, try later" in gathered
    assert "wrong number of arguments for 'addjob' command" in gathered
    assert gathered.count("REPLICATE must be between 1 and 65535") == 2


def test_a_pipeline_answers_as_the_same_requests_do_one_by_one(three: list[NodeProcess]) -> None:
    # redis-py drops the "ERR " of an error's text; check_same_answers drops it anyway.
    check_same_answers(three[0], lambda spelling, queue: _run_pipeline(three[0], spelling, queue))


def test_runs_held_behind_a_blocked_getjob_and_a_full_line_of_owed_replies(
    three: list[NodeProcess],
) -> None:
    client = three[0].client()
    pipe = client.pipeline(transaction=False)
    pipe.execute_command("GETJOB", "TIMEOUT", "300", "FROM", "nothing-here")
    for n in range(5):
        pipe.execute_command("ADDJOB", "q", f"held {n}", "5000", "REPLICATE", "3")
    replies = pipe.execute()
    assert replies[0] is None and all(JOB_ID.match(r) for r in replies[1:])
    # More synchronous ADDJOBs than a connection may owe replies for: the rest wait.
    count = MAX_OUTSTANDING + 3 * RUN_MAX_JOBS
    pipe = client.pipeline(transaction=False)
    for n in range(count):
        pipe.execute_command("ADDJOB", "line", f"job {n}", "5000", "REPLICATE", "3")
    job_ids = pipe.execute()
    assert len(set(job_ids)) == count and all(JOB_ID.match(r) for r in job_ids)
    bodies = [show(three[0], job_id)[b"body"] for job_id in job_ids[::RUN_MAX_JOBS]]  # type: ignore[index]
    assert bodies == [b"job %d" % n for n in range(0, count, RUN_MAX_JOBS)]
    assert holders(three, job_ids[-1]) == 3


def test_a_read_longer_than_a_turn_runs_its_runs_over_several_turns(
    three: list[NodeProcess],
) -> None:
    """One read of more ADDJOBs than a turn runs (TURN_REQUESTS): the rest of the read,
    a run cut at the turn's end included, goes on in the next turns, in order."""
    client = three[0].client()
    count = 2 * TURN_REQUESTS + RUN_MAX_JOBS // 2
    # Short requests (~50 bytes), so that one read of the socket holds over a turn's worth.
    raw = b"".join(
        b"*5\r\n$6\r\nADDJOB\r\n$4\r\nlong\r\n$%d\r\n%d\r\n$1\r\n0\r\n$5\r\nASYNC\r\n"
        % (len(str(n)), n)
        for n in range(count)
    )
    with socket.create_connection(("127.0.0.1", three[0].port)) as sock:
        sock.sendall(raw)
        received = b""
        sock.settimeout(30)
        while received.count(b"\r\n") < count:
            chunk = sock.recv(1 << 16)
            assert chunk, "the node closed the connection"
            received += chunk
    job_ids = [line[1:] for line in received.split(b"\r\n")[:count]]
    assert all(JOB_ID.match(job_id) for job_id in job_ids) and len(set(job_ids)) == count
    for n in range(0, count, 97):
        assert show(three[0], job_ids[n])[b"body"] == b"%d" % n  # type: ignore[index]
    assert client.execute_command("QLEN", "long") == count


def test_a_run_over_maxmemory_is_refused_job_by_job_and_not_counted(
    three: list[NodeProcess],
) -> None:
    client = three[0].client()
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", str(used // 2))
    calls = _addjob_calls(three[0])
    pipe = client.pipeline(transaction=False)
    for n in range(5):
        pipe.execute_command("ADDJOB", "q", f"job {n}", "5000", "REPLICATE", "3")
    replies = pipe.execute(raise_on_error=False)
    # redis-py turns "-OOM ..." into OutOfMemoryError, without its first word.
    assert [(type(reply), str(reply)) for reply in replies] == [
        (redis.exceptions.OutOfMemoryError, "command not allowed when used memory > 'maxmemory'.")
    ] * 5
    assert _addjob_calls(three[0]) == calls
    client.config_set("maxmemory", "0")
    assert JOB_ID.match(client.execute_command("ADDJOB", "q", "now", "5000", "REPLICATE", "3"))


def test_a_renamed_addjob_is_unknown_in_a_run_too(tmp_path: Path) -> None:
    config = tmp_path / "node.conf"
    config.write_text("rename-command ADDJOB PUSHJOB\n")
    nodes: list[NodeProcess] = []
    try:
        form(tmp_path, nodes, 2, "--include", str(config))
        pipe = nodes[0].client().pipeline(transaction=False)
        for n in range(3):
            pipe.execute_command("ADDJOB", "q", f"job {n}", "5000", "REPLICATE", "2")
        pipe.execute_command("PUSHJOB", "q", "pushed", "5000", "REPLICATE", "2")
        replies = pipe.execute(raise_on_error=False)
        assert [str(reply)[:25] for reply in replies[:3]] == ["unknown command 'ADDJOB'"[:25]] * 3
        assert isinstance(replies[3], bytes) and JOB_ID.match(replies[3])
    finally:
        for node in nodes:
            node.stop()


@pytest.mark.parametrize("options", [("ASYNC",), ()], ids=["async", "sync"])
def test_each_reply_of_one_clients_run_is_its_own_jobs_id(
    three: list[NodeProcess], options: tuple[str, ...]
) -> None:
    """A pipelined run of one client is answered in one block (ASYNC: every reply ready
    at once) or by slots owed together (synchronous): reply n is the ID of job n."""
    client = three[0].client()
    count = 2 * RUN_MAX_JOBS + 3
    pipe = client.pipeline(transaction=False)
    for n in range(count):
        pipe.execute_command("ADDJOB", "own", f"body {n}", "5000", "REPLICATE", "3", *options)
    job_ids = pipe.execute()
    assert len(set(job_ids)) == count and all(JOB_ID.match(job_id) for job_id in job_ids)
    bodies = [show(three[0], job_id)[b"body"] for job_id in job_ids]  # type: ignore[index]
    assert bodies == [b"body %d" % n for n in range(count)]
    assert client.execute_command("QLEN", "own") == count
