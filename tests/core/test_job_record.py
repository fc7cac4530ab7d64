"""job_record (core/records.py): compiled, an exact Job's record is built from its slots
read in place and allocated at its size; it must be the record the attributes give, for
any job, and an ordinary JobRecord. encode_job unpacks any tuple or sequence the same."""

from __future__ import annotations

import gc
import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor import compiled
from conveyor.core import records
from conveyor.core.codec import JobRecord, decode_job, encode_job
from conveyor.core.job import DELIVERED, NACK_PENDING, QUEUED_ONCE, WILLQUEUE_SENT, Job

EXPECT_COMPILED = os.environ.get("CONVEYOR_EXPECT_COMPILED", "") not in ("", "0")
ME = b"m" * 40
JOB_ID = b"D-00000000-" + b"a" * 24 + b"-0001"
NAMES = st.sampled_from([b"a" * 40, b"b" * 40, b"c" * 40])
BIG = st.integers(0, 2**70)  # past every Disque field: the record saturates


class _SubJob(Job):
    """Not exactly a Job: job_record reads its attributes (the generic path)."""

    __slots__ = ("extra",)


def _expected(job: Job, node_name: bytes, now_ms: int, for_bus: bool) -> JobRecord:
    """The record, field by field, from the attributes and Disque's rules."""
    etime = max(job.etime - now_ms, 0) // 1000 + 1 if for_bus else job.etime // 1000
    flags = 0
    if job.flags & QUEUED_ONCE:
        flags = 1 | (2 if job.retry else 0)
    if job.flags & DELIVERED and not for_bus:
        flags |= 4
    return JobRecord(
        job.id,
        job.state,
        0,
        flags,
        min(job.repl, 0xFFFF),
        min(etime, 0xFFFFFFFF),
        job.ctime,
        min(job.delay, 0xFFFFFFFF),
        min(job.retry, 0xFFFFFFFF),
        min(job.nacks, 0xFFFF),
        min(job.additional_deliveries, 0xFFFF),
        job.queue,
        job.body,
        (node_name,) if job.nodes_delivered is None else job.nodes_delivered,
    )


def _fill(job: Job, draw: st.DataObject) -> Job:
    job.state = draw.draw(st.integers(0, 3))
    job.flags = draw.draw(
        st.sets(st.sampled_from([QUEUED_ONCE, DELIVERED, NACK_PENDING, WILLQUEUE_SENT])).map(sum)
    )
    job.nacks = draw.draw(BIG)
    job.additional_deliveries = draw.draw(BIG)
    job.nodes_delivered = draw.draw(st.none() | st.lists(NAMES, max_size=3).map(tuple))
    return job


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    repl=BIG,
    ctime=BIG,
    etime=BIG,
    delay=BIG,
    retry=BIG,
    now_ms=st.integers(0, 2**45),
    for_bus=st.booleans(),
    body=st.binary(max_size=40),
)
def test_the_record_is_the_one_the_attributes_give(
    data: st.DataObject,
    repl: int,
    ctime: int,
    etime: int,
    delay: int,
    retry: int,
    now_ms: int,
    for_bus: bool,
    body: bytes,
) -> None:
    args = (JOB_ID, b"q", body, repl, ctime, etime, delay, retry)
    exact = _fill(Job(*args), data)
    sub = _SubJob(*args)
    for name in ("state", "flags", "nacks", "additional_deliveries", "nodes_delivered"):
        setattr(sub, name, getattr(exact, name))
    expected = _expected(exact, ME, now_ms, for_bus)
    for job in (exact, sub):
        record = records.job_record(job, ME, now_ms, for_bus)
        assert type(record) is JobRecord
        assert record == expected
        assert [type(value) for value in record] == [type(value) for value in expected]
        if job.nodes_delivered is not None:
            assert record.nodes is job.nodes_delivered  # shared, not copied
        if record.ctime < 2**64:  # the one field that does not saturate
            assert decode_job(encode_job(record))[0] == record
    # A run's copies (records.job_records, one C call a job when compiled): the same.
    assert records.job_records([exact, sub, exact], ME, now_ms, for_bus) == [expected] * 3


def test_a_record_behaves_as_any_named_tuple() -> None:
    job = Job(JOB_ID, b"q", b"body", 3, 5, 90_000, 0, 60)
    record = records.job_record(job, ME, 1_000, True)
    assert record._replace(state=2).state == 2 and record._replace(state=2)[1:] != record[1:]
    assert hash(record) == hash(tuple(record)) and record == tuple(record)
    assert record._asdict()["etime"] == 90 and record.queue == b"q"
    # Freed by reference counting when the last reference goes.
    before = sys.getrefcount(record.body)
    del record
    assert sys.getrefcount(job.body) <= before


def test_records_are_out_of_the_collectors_sight_only_when_compiled() -> None:
    record = records.job_record(Job(JOB_ID, b"q", b"b", 1, 0, 1, 0, 0), ME, 0)
    if compiled.pure_requested():
        assert not records.COMPILED and gc.is_tracked(record)
    elif EXPECT_COMPILED:
        assert records.COMPILED and records._IN_PLACE
        assert not gc.is_tracked(record)


def test_a_slot_never_set_is_an_attribute_error_on_both_paths() -> None:
    for job_type in (Job, _SubJob):
        job = job_type.__new__(job_type)  # no __init__: every slot empty
        with pytest.raises(AttributeError):
            records.job_record(job, ME, 0, True)
        job.id, job.state, job.flags = JOB_ID, 1, 0
        with pytest.raises(AttributeError):  # etime and the rest still empty
            records.job_record(job, ME, 0, False)


def test_encode_job_takes_any_sequence_of_the_fields() -> None:
    record = records.job_record(Job(JOB_ID, b"q", b"body", 3, 5, 90_000, 0, 60), ME, 0)
    data = encode_job(record)
    assert encode_job(tuple(record)) == data
    assert encode_job(list(record)) == data  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode_job(tuple(record)[:13])  # type: ignore[arg-type]
