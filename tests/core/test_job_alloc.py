"""new_job (core/job_alloc.py): compiled, a Job made by storing its slots in place; it
must be the job Job(...) makes, slot for slot, out of the collector's sight, and freed
when its last reference goes."""

from __future__ import annotations

import gc
import os
import sys

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
