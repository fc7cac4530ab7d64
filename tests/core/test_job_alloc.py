"""new_job (core/job_alloc.py): compiled, a Job made by storing its slots in place; it
must be the job Job(...) makes, slot for slot, out of the collector's sight, and freed
when its last reference goes."""

from __future__ import annotations

import gc
import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor import compiled
from conveyor.core import job_alloc
from conveyor.core.job import Job

EXPECT_COMPILED = os.environ.get("CONVEYOR_EXPECT_COMPILED", "") not in ("", "0")
INTS = st.integers(0, 2**70)


@settings(max_examples=200, deadline=None)
@given(
    job_id=st.binary(min_size=1, max_size=48),
    queue=st.binary(max_size=12),
    body=st.binary(max_size=64),
    repl=INTS,
    ctime=INTS,
    etime=INTS,
    delay=INTS,
    retry=INTS,
)
def test_new_job_is_the_job_the_class_makes(
    job_id: bytes,
    queue: bytes,
    body: bytes,
    repl: int,
    ctime: int,
    etime: int,
    delay: int,
    retry: int,
) -> None:
    args = (job_id, queue, body, repl, ctime, etime, delay, retry)
    made, expected = job_alloc.new_job(*args), Job(*args)
    assert type(made) is Job
    for name in Job.__slots__:
        assert getattr(made, name) == getattr(expected, name), name
        assert type(getattr(made, name)) is type(getattr(expected, name)), name
    # The caller's objects themselves, not copies.
    assert made.id is job_id and made.queue is queue and made.body is body
    assert made.awake_at() == expected.awake_at() and not made < expected < made


def test_compiled_it_stores_in_place_and_untracked() -> None:
    job = job_alloc.new_job(b"D-" + b"a" * 38, b"q", b"body", 1, 0, 60_000, 0, 5)
    if compiled.pure_requested():
        assert not job_alloc._IN_PLACE and gc.is_tracked(job)
    elif EXPECT_COMPILED:
        assert job_alloc._IN_PLACE and not gc.is_tracked(job)


def test_a_new_job_lets_go_of_its_fields_when_freed() -> None:
    body = b"a body no other object shares " + os.urandom(8)
    before = sys.getrefcount(body)
    jobs = [job_alloc.new_job(b"x" * 40, b"q", body, 1, 0, 1, 0, 0) for _ in range(100)]
    assert sys.getrefcount(body) == before + 100
    jobs[0].body = b"other"  # a slot set again drops the first value
    assert sys.getrefcount(body) == before + 99
    del jobs
    assert sys.getrefcount(body) == before


@settings(max_examples=200, deadline=None)
@given(
    prefix=st.binary(max_size=16),
    suffix=st.binary(max_size=8),
    chars=st.binary(max_size=24 * 6),
    start=st.integers(0, 24 * 6),
    count=st.integers(0, 6),
)
def test_new_ids_are_the_slices_between_prefix_and_suffix(
    prefix: bytes, suffix: bytes, chars: bytes, start: int, count: int
) -> None:
    """new_ids (a run's IDs, compiled when built) is prefix + 24 chars + suffix for each
    24-char step from `start`, and refuses a run that would pass the end of `chars`."""
    if start + 24 * count > len(chars):
        with pytest.raises(ValueError, match="not within the block"):
            job_alloc.new_ids(prefix, chars, start, count, 24, suffix)
        return
    ids = job_alloc.new_ids(prefix, chars, start, count, 24, suffix)
    assert ids == [
        prefix + chars[at : at + 24] + suffix for at in range(start, start + 24 * count, 24)
    ]
    assert all(type(one) is bytes for one in ids)


def test_new_ids_refuse_a_negative_start_or_count() -> None:
    for start, count in ((-1, 1), (0, -1)):
        with pytest.raises(ValueError, match="not within the block"):
            job_alloc.new_ids(b"D-", b"x" * 48, start, count, 24, b"-0001")


@settings(max_examples=100, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=16), max_size=8),
    ctime=INTS,
    state=st.integers(0, 9),
    flags=st.integers(0, 2**8),
)
def test_new_jobs_are_new_job_one_by_one_with_state_and_flags(
    bodies: list[bytes], ctime: int, state: int, flags: int
) -> None:
    """new_jobs (a run of ADDJOBs, compiled when built) makes the jobs new_job makes, the
    n-th at ctime + n, each with `state` and `flags` and entered in the dict."""
    ids = [b"D-%038d" % n for n in range(len(bodies))]
    by_id: dict[bytes, Job] = {b"other": Job(b"other", b"q", b"", 1, 0, 0, 0, 0)}
    jobs = job_alloc.new_jobs(ids, b"q", bodies, 3, ctime, 9, 0, 5, state, flags, by_id)
    assert list(by_id) == [b"other", *ids] and [by_id[i] for i in ids] == jobs
    for n, (job, body) in enumerate(zip(jobs, bodies, strict=True)):
        expected = Job(ids[n], b"q", body, 3, ctime + n, 9, 0, 5)
        expected.state, expected.flags = state, flags
        for name in Job.__slots__:
            assert getattr(job, name) == getattr(expected, name), name
        assert job.body is body and not (EXPECT_COMPILED and gc.is_tracked(job))


def test_new_jobs_refuse_ids_and_bodies_of_other_lengths() -> None:
    with pytest.raises(ValueError, match="2 IDs for 1 bodies"):
        job_alloc.new_jobs([b"a", b"b"], b"q", [b"x"], 1, 0, 0, 0, 0, 0, 0, {})


def test_new_jobs_let_go_of_the_values_they_replace() -> None:
    """The state and flags a job had from new_job are dropped when new_jobs sets its own
    (a slot set in place must release what it held)."""
    state = 10**30 + int.from_bytes(os.urandom(4), "big")  # an object no one else holds
    before = sys.getrefcount(state)
    jobs = job_alloc.new_jobs([b"a", b"b"], b"q", [b"x", b"y"], 1, 0, 0, 0, 0, state, 0, {})
    assert sys.getrefcount(state) == before + 2
    jobs[0].state = 0
    del jobs
    assert sys.getrefcount(state) == before
