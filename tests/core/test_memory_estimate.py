"""INFO's used_memory rests on the engine's per-job estimate: it must track real allocations."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from conveyor.core.engine import AddJobArgs, Engine


@pytest.mark.parametrize("body_size", [10, 100, 1000])
def test_job_estimate_is_within_a_quarter_of_what_python_allocates(body_size: int) -> None:
    engine = Engine("e" * 40, b"seed", random.Random(3))
    body = b"b" * body_size
    jobs = 20_000
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for index in range(jobs):
        # Distinct bodies, as real producers send: a shared one would be counted once.
        args = AddJobArgs(b"q", body[:-6] + b"%06d" % index, 1, 0, None, None, None, False)
        engine.add_job(args, 1_700_000_000_000 + index // 50)
    allocated = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    estimate = engine.memory_estimate()
    assert 0.75 * allocated <= estimate <= 1.25 * allocated, (estimate, allocated)


def test_estimate_goes_back_down_when_jobs_are_acknowledged() -> None:
    engine = Engine("e" * 40, b"seed", random.Random(3))
    ids = [
        engine.add_job(AddJobArgs(b"q", b"x" * 100, 1, 0, None, None, None, False), 1000).id
        for _ in range(100)
    ]
    full = engine.memory_estimate()
    engine.ack(ids[:50], 1001)
    half = engine.memory_estimate()
    engine.ack(ids[50:], 1002)
    assert full > half > engine.memory_estimate()
    assert engine.jobs_bytes == 0
