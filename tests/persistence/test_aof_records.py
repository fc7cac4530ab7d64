"""Which job events write which AOF records, and that the fast LOADJOB encoder writes
exactly what the job codec writes (the codec is checked byte for byte against Disque's
files in tests/core/test_codec.py)."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from conveyor.core.args import AddJobArgs
from conveyor.core.codec import decode_job, encode_job
from conveyor.core.effects import EV_ADDED, EV_ADDED_QUEUED, EV_QUEUED, one_per_change
from conveyor.core.job import ACTIVE, QUEUED, Job
from conveyor.core.node import NodeCore
from conveyor.core.records import job_record
from conveyor.persistence.reader import read_records
from conveyor.persistence.records import RecordEncoder, deljob, loadjob

NODE = "8bd36d49a0230449efcad4173c4b4c07f2f63204"
NOW = 1_795_344_732_800


def add(
    core: NodeCore,
    queue: bytes,
    body: bytes,
    *,
    delay: int = 0,
    retry: int | None = None,
    ttl: int | None = None,
) -> Job:
    args = AddJobArgs(queue, body, None, delay, retry, ttl, None, False)
    return core.add_job(args, NOW)


def recording_core() -> NodeCore:
    core = NodeCore(NODE, b"seed", random.Random(3))
    core.record_job_events(True)
    return core


def records(core: NodeCore) -> list[tuple[bytes, bytes]]:
    data = b"".join(RecordEncoder(NODE.encode()).from_events(core.take_job_events()))
    return [(record.command, record.argument) for record in read_records(data)]


def test_addjob_writes_one_loadjob_with_the_state_after_queueing() -> None:
    core = recording_core()
    queued = core.add_default_job(b"q", b"now", NOW)
    delayed = add(core, b"q", b"later", delay=60)
    written = records(core)
    assert [command for command, _ in written] == [b"LOADJOB", b"LOADJOB"]
    first, second = (decode_job(argument)[0] for _, argument in written)
    assert (first.id, first.state, first.flags) == (queued.id, QUEUED, 3)
    assert (second.id, second.state, second.flags) == (delayed.id, ACTIVE, 0)


def test_a_plain_addjob_event_writes_what_its_two_events_write() -> None:
    core = recording_core()
    core.add_default_job(b"q", b"first", NOW)  # makes the queue: the general path
    core.add_default_job(b"q", b"now", NOW)
    add(core, b"q", b"later", delay=60)
    events = core.take_job_events()
    kinds = [event[0] for event in events]
    assert kinds == [EV_ADDED, EV_QUEUED, EV_ADDED_QUEUED, EV_ADDED]
    encoder = RecordEncoder(NODE.encode())
    written = encoder.from_events(events)
    assert len(written) == 3
    assert written == encoder.from_events(list(one_per_change(events)))


def test_deliveries_nacks_and_dequeues_write_nothing_acks_write_deljob() -> None:
    core = recording_core()
    job = core.add_default_job(b"q", b"body", NOW)
    records(core)
    core.get_jobs([b"q"], 1, NOW)
    core.nack([job.id], NOW)
    core.get_jobs([b"q"], 1, NOW)
    assert records(core) == []
    core.ack([job.id], NOW)
    assert records(core) == [(b"DELJOB", job.id)]


def test_expiry_and_deljob_write_deljob_once() -> None:
    core = recording_core()
    short = add(core, b"q", b"short", ttl=1, retry=0)
    other = core.add_default_job(b"q", b"other", NOW)
    records(core)
    core.tick(NOW + 5_000)
    core.del_jobs([other.id], NOW + 5_000)
    assert records(core) == [(b"DELJOB", short.id), (b"DELJOB", other.id)]


def test_a_job_added_and_acked_in_one_batch_is_written_then_deleted() -> None:
    core = recording_core()
    job = core.add_default_job(b"q", b"body", NOW)
    core.ack([job.id], NOW)
    assert [command for command, _ in records(core)] == [b"LOADJOB", b"DELJOB"]


@given(
    queue=st.binary(min_size=1, max_size=40),
    body=st.binary(max_size=300),
    delay=st.integers(0, 3600),
    retry=st.integers(0, 3600),
    delivered=st.booleans(),
)
def test_the_fast_encoder_writes_what_the_codec_writes(
    queue: bytes, body: bytes, delay: int, retry: int, delivered: bool
) -> None:
    core = NodeCore(NODE, b"seed", random.Random(1))
    job = add(core, queue, body, delay=delay, retry=retry)
    if delivered and not delay:
        core.get_jobs([queue], 1, NOW)
    expected = loadjob(encode_job(job_record(job, NODE.encode(), NOW)))
    assert RecordEncoder(NODE.encode()).job(job, job.state) == expected
    snapshot = RecordEncoder(NODE.encode()).snapshot_record(job)
    assert snapshot == expected


def test_deljob_record_framing() -> None:
    job_id = b"D-8bd36d49-BAbMTO/1taPFRfHQEJTfn/qs-05a1"
    assert deljob(job_id) == b"*2\r\n$6\r\nDELJOB\r\n$40\r\n" + job_id + b"\r\n"


def test_times_past_disques_u32_saturate_instead_of_failing() -> None:
    # Found by the command fuzzer: ADDJOB takes TTL/DELAY/RETRY up to 2**63-1 seconds (as
    # Disque does), but the serialized job holds u32 seconds; the AOF writer crashed.
    core = NodeCore(NODE, b"seed", random.Random(1))
    job = add(core, b"q", b"body", delay=2**40, retry=2**40, ttl=2**62)
    for record in (
        RecordEncoder(NODE.encode()).job(job, job.state),
        loadjob(encode_job(job_record(job, NODE.encode(), NOW))),
    ):
        decoded, _ = decode_job(next(read_records(record)).argument)
        assert decoded.etime == decoded.delay == decoded.retry == 0xFFFFFFFF
