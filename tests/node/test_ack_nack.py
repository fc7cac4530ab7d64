"""ACKJOB, FASTACK, DELJOB, WORKING, NACK, ENQUEUE, DEQUEUE: replies, states, bad IDs."""

from __future__ import annotations

import pytest
import redis

from tests.node.helpers import (
    BAD_IDS,
    BAD_NUMBERS,
    BADID,
    UNKNOWN_ID,
    RawClient,
    arity_error,
    counters,
    debug_jobs,
    error_of,
    show,
)

MULTI_ID_COMMANDS = ["ACKJOB", "FASTACK", "DELJOB", "NACK", "ENQUEUE", "DEQUEUE"]


def add(r: redis.Redis, queue: str = "q", body: str = "body", *options: str) -> bytes:
    return r.execute_command("ADDJOB", queue, body, "0", *options)


def fetch(r: redis.Redis, queue: str = "q") -> bytes:
    reply = r.execute_command("GETJOB", "NOHANG", "FROM", queue)
    assert reply is not None
    return reply[0][1]


def state(r: redis.Redis, job_id: bytes) -> bytes | None:
    fields = show(r, job_id)
    return None if fields is None else fields[b"state"]


# -- shared behaviour of the multi-ID commands ----------------------------------------------


@pytest.mark.parametrize("command", MULTI_ID_COMMANDS)
def test_no_ids_is_zero(raw: RawClient, command: str) -> None:
    assert raw.call_raw(command) == b":0\r\n"


@pytest.mark.parametrize("command", MULTI_ID_COMMANDS)
def test_unknown_ids_are_zero(r: redis.Redis, command: str) -> None:
    assert r.execute_command(command, UNKNOWN_ID) == 0
    assert debug_jobs(r) == [0, 0]


@pytest.mark.parametrize("command", [*MULTI_ID_COMMANDS, "WORKING", "SHOW"])
@pytest.mark.parametrize("bad_id", BAD_IDS)
def test_bad_id(r: redis.Redis, command: str, bad_id: bytes) -> None:
    assert error_of(r, command, bad_id) == BADID


@pytest.mark.parametrize("command", MULTI_ID_COMMANDS)
@pytest.mark.parametrize("position", [0, 1, 2])
def test_one_bad_id_among_good_ones_does_nothing(
    r: redis.Redis, command: str, position: int
) -> None:
    queued = add(r, body="queued")
    active = add(r, body="active")
    assert fetch(r) == queued
    r.execute_command("ENQUEUE", queued)  # back in the queue, additional-deliveries 1
    assert state(r, queued) == b"queued" and state(r, active) == b"queued"
    r.execute_command("DEQUEUE", active)
    assert state(r, active) == b"active"
    before = {job_id: show(r, job_id) for job_id in (queued, active)}
    ids: list[bytes] = [queued, active]
    ids.insert(position, b"D-bad")
    assert error_of(r, command, *ids) == BADID
    for job_id, fields in before.items():
        now = show(r, job_id)
        assert now is not None and fields is not None
        for key in (b"state", b"queue", b"nacks", b"additional-deliveries", b"body"):
            assert now[key] == fields[key], (command, key)
    assert r.execute_command("QPEEK", "q", "10") == [[b"q", queued, b"queued"]]
    assert debug_jobs(r) == [2, 1]


def test_nack_delay_with_a_bad_id_does_nothing(r: redis.Redis) -> None:
    job_id = add(r)
    fetch(r)
    assert error_of(r, "NACK", job_id, "nope", "DELAY", "1") == BADID
    assert counters(r, job_id) == (0, 0)
    assert state(r, job_id) == b"active"


# -- ACKJOB / FASTACK / DELJOB --------------------------------------------------------------


@pytest.mark.parametrize("command", ["ACKJOB", "FASTACK"])
def test_ack_frees_jobs(r: redis.Redis, command: str) -> None:
    queued = add(r)
    active = add(r)
    other = add(r)
    r.execute_command("DEQUEUE", active)
    assert r.execute_command(command, queued, active, UNKNOWN_ID) == 2
    assert show(r, queued) is None
    assert show(r, active) is None
    assert r.execute_command("QLEN", "q") == 1
    assert r.execute_command("QPEEK", "q", "5")[0][1] == other
    assert debug_jobs(r) == [1, 1]
    assert r.execute_command(command, queued) == 0


@pytest.mark.parametrize("command", ["ACKJOB", "FASTACK", "DELJOB"])
def test_same_id_twice_counts_once(r: redis.Redis, command: str) -> None:
    job_id = add(r)
    assert r.execute_command(command, job_id, job_id) == 1
    assert debug_jobs(r)[0] == 0


def test_ack_after_getjob(r: redis.Redis) -> None:
    job_id = add(r)
    fetch(r)
    assert r.execute_command("ACKJOB", job_id) == 1
    assert show(r, job_id) is None
    assert r.execute_command("NACK", job_id) == 0
    assert error_of(r, "WORKING", job_id) == "NOJOB Job not known in the context of this node."


def test_acked_job_is_not_redelivered(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "RETRY", "1")
    fetch(r)
    r.execute_command("ACKJOB", job_id)
    assert r.execute_command("GETJOB", "TIMEOUT", "1600", "FROM", "q") is None


def test_deljob_any_state(r: redis.Redis) -> None:
    queued = add(r)
    active = add(r)
    delayed = add(r, "q", "later", "DELAY", "100")
    r.execute_command("DEQUEUE", active)
    keep = add(r)
    assert r.execute_command("DELJOB", queued, active, delayed, UNKNOWN_ID) == 3
    assert debug_jobs(r)[0] == 1
    assert r.execute_command("QPEEK", "q", "10") == [[b"q", keep, b"body"]]


def test_ack_is_case_insensitive(r: redis.Redis) -> None:
    job_id = add(r)
    assert r.execute_command("aCkJoB", job_id) == 1


# -- WORKING --------------------------------------------------------------------------------


def test_working_returns_retry(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "RETRY", "42")
    fetch(r)
    assert r.execute_command("WORKING", job_id) == 42
    assert state(r, job_id) == b"active"


def test_working_default_retry(r: redis.Redis) -> None:
    job_id = add(r)
    fetch(r)
    assert r.execute_command("WORKING", job_id) == 300


def test_working_takes_a_queued_job_out_of_its_queue(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "RETRY", "5")
    assert r.execute_command("WORKING", job_id) == 5
    assert state(r, job_id) == b"active"
    assert r.execute_command("QLEN", "q") == 0
    fields = show(r, job_id)
    assert fields is not None
    assert 4000 <= fields[b"next-requeue-within"] <= 5250


def test_working_postpones_requeue(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "RETRY", "100")
    fetch(r)
    assert r.execute_command("WORKING", job_id) == 100
    fields = show(r, job_id)
    assert fields is not None
    assert 99_000 <= fields[b"next-requeue-within"] <= 100_250


def test_working_unknown(r: redis.Redis) -> None:
    expected = "NOJOB Job not known in the context of this node."
    assert error_of(r, "WORKING", UNKNOWN_ID) == expected


@pytest.mark.parametrize("argv", [("WORKING",), ("WORKING", UNKNOWN_ID, UNKNOWN_ID)])
def test_working_arity(r: redis.Redis, argv: tuple[bytes, ...]) -> None:
    assert error_of(r, *argv) == arity_error("working")


# -- NACK -----------------------------------------------------------------------------------


def test_nack_requeues_and_counts(r: redis.Redis) -> None:
    job_id = add(r)
    fetch(r)
    assert r.execute_command("NACK", job_id) == 1
    assert state(r, job_id) == b"queued"
    assert counters(r, job_id) == (1, 0)
    assert r.execute_command("QLEN", "q") == 1
    fetch(r)
    assert r.execute_command("NACK", job_id) == 1
    assert counters(r, job_id) == (2, 0)


def test_nack_puts_job_back_in_creation_order(r: redis.Redis) -> None:
    first = add(r, body="first")
    second = add(r, body="second")
    assert fetch(r) == first
    r.execute_command("NACK", first)
    assert [job[1] for job in r.execute_command("QPEEK", "q", "10")] == [first, second]


def test_nack_of_queued_job_is_zero(r: redis.Redis) -> None:
    job_id = add(r)
    assert r.execute_command("NACK", job_id) == 0
    assert counters(r, job_id) == (0, 0)
    assert r.execute_command("QLEN", "q") == 1


def test_nack_several(r: redis.Redis) -> None:
    ids = [add(r) for _ in range(3)]
    r.execute_command("GETJOB", "COUNT", "2", "FROM", "q")
    assert r.execute_command("NACK", *ids, UNKNOWN_ID) == 2
    assert r.execute_command("QLEN", "q") == 3
    assert [counters(r, job_id)[0] for job_id in ids] == [1, 1, 0]


def test_nack_at_most_once_job_is_refused(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "RETRY", "0")
    fetch(r)
    assert r.execute_command("NACK", job_id) == 0
    assert r.execute_command("ENQUEUE", job_id) == 0
    assert state(r, job_id) == b"active"
    assert r.execute_command("QLEN", "q") == 0
    assert counters(r, job_id) == (0, 0)


def test_nack_delay_counts_at_once_and_waits(r: redis.Redis) -> None:
    job_id = add(r)
    fetch(r)
    assert r.execute_command("NACK", job_id, "DELAY", "100") == 1
    assert counters(r, job_id) == (1, 0)
    assert state(r, job_id) == b"active"
    assert r.execute_command("QLEN", "q") == 0
    # A second NACK while the first is pending is still a NACK of an active job.
    assert r.execute_command("NACK", job_id) == 1
    assert counters(r, job_id) == (2, 0)
    assert state(r, job_id) == b"queued"


def test_nack_delay_zero_is_immediate(r: redis.Redis) -> None:
    job_id = add(r)
    fetch(r)
    assert r.execute_command("nack", job_id, "delay", "0") == 1
    assert state(r, job_id) == b"queued"
    assert counters(r, job_id) == (1, 0)


@pytest.mark.parametrize("delay", ["-1", *BAD_NUMBERS])
def test_nack_bad_delay(r: redis.Redis, delay: str) -> None:
    job_id = add(r)
    fetch(r)
    expected = "ERR DELAY time must be a non negative number"
    assert error_of(r, "NACK", job_id, "DELAY", delay) == expected
    assert counters(r, job_id) == (0, 0)
    assert state(r, job_id) == b"active"


def test_nack_delay_without_value_is_a_bad_id(r: redis.Redis) -> None:
    job_id = add(r)
    fetch(r)
    assert error_of(r, "NACK", job_id, "DELAY") == BADID
    assert state(r, job_id) == b"active"


# -- ENQUEUE / DEQUEUE ----------------------------------------------------------------------


def test_enqueue_counts_additional_deliveries(r: redis.Redis) -> None:
    job_id = add(r)
    fetch(r)
    assert r.execute_command("ENQUEUE", job_id) == 1
    assert state(r, job_id) == b"queued"
    assert counters(r, job_id) == (0, 1)
    assert r.execute_command("ENQUEUE", job_id) == 0  # already queued
    assert counters(r, job_id) == (0, 1)


def test_enqueue_of_a_delayed_job_is_its_first_queueing(r: redis.Redis) -> None:
    job_id = add(r, "q", "x", "DELAY", "100")
    assert state(r, job_id) == b"active"
    assert r.execute_command("ENQUEUE", job_id) == 1
    assert state(r, job_id) == b"queued"
    assert counters(r, job_id) == (0, 0)
    assert fetch(r) == job_id


def test_dequeue(r: redis.Redis) -> None:
    job_id = add(r)
    other = add(r)
    assert r.execute_command("DEQUEUE", job_id, UNKNOWN_ID) == 1
    assert state(r, job_id) == b"active"
    assert r.execute_command("QLEN", "q") == 1
    assert r.execute_command("DEQUEUE", job_id) == 0
    assert fetch(r) == other
    assert r.execute_command("ENQUEUE", job_id) == 1
    assert fetch(r) == job_id


def test_dequeue_then_ack(r: redis.Redis) -> None:
    job_id = add(r)
    r.execute_command("DEQUEUE", job_id)
    assert r.execute_command("ACKJOB", job_id) == 1
    assert debug_jobs(r)[0] == 0


def test_working_leaves_a_queued_at_most_once_job_in_its_queue(r: redis.Redis) -> None:
    job_id = r.execute_command("ADDJOB", "amo", "x", "0", "RETRY", "0")
    assert r.execute_command("WORKING", job_id) == 0
    assert r.execute_command("QLEN", "amo") == 1
    assert r.execute_command("GETJOB", "NOHANG", "FROM", "amo")[0][1] == job_id


def test_working_never_brings_a_delayed_job_forward(r: redis.Redis) -> None:
    job_id = r.execute_command("ADDJOB", "later", "x", "0", "DELAY", "10", "RETRY", "1")
    assert r.execute_command("WORKING", job_id) == 1
    fields = r.execute_command("SHOW", job_id)
    show = dict(zip(fields[::2], fields[1::2], strict=True))
    assert show[b"next-requeue-within"] > 8000
