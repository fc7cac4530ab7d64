"""Jobs are out of the cycle collector's sight when compiled (core/untracked.py), and
freed all the same: by reference counting, or with a cycle that held them."""

from __future__ import annotations

import gc
import os
import weakref

from conveyor import compiled
from conveyor.core import untracked
from conveyor.core.job import Job

EXPECT_COMPILED = os.environ.get("CONVEYOR_EXPECT_COMPILED", "") not in ("", "0")


def _job() -> Job:
    return Job(b"D-00000000-" + b"a" * 24 + b"-0001", b"q", b"body", 1, 0, 60_000, 0, 5)


def test_a_job_is_tracked_only_in_pure_python() -> None:
    job = _job()
    if compiled.pure_requested():
        assert not untracked.COMPILED
        assert gc.is_tracked(job)
    elif EXPECT_COMPILED:
        assert untracked.COMPILED
        assert not gc.is_tracked(job)
    else:
        assert gc.is_tracked(job) is not untracked.COMPILED


def test_untracking_twice_or_an_untracked_object_is_harmless() -> None:
    job = _job()
    untracked.untrack(job)
    untracked.untrack(job)
    untracked.untrack(b"bytes are never tracked")
    assert not gc.is_tracked(b"x") and job.queue == b"q"


class _WatchedJob(Job):
    """A Job a weak reference can watch (Job itself has no __weakref__ slot)."""

    __slots__ = ("__weakref__",)


def test_an_untracked_job_is_still_freed() -> None:
    job = _WatchedJob(b"D-00000000-" + b"a" * 24 + b"-0001", b"q", b"body", 1, 0, 60_000, 0, 5)
    assert gc.is_tracked(job) is not untracked.COMPILED
    job.nodes_delivered = (b"a" * 40, b"b" * 40)
    probe = weakref.ref(job)
    # Held only by a cycle of lists: the collector frees the cycle, and the job goes
    # with its last reference although the collector never saw it.
    holder: list[object] = [job]
    holder.append(holder)
    del job, holder
    assert probe() is not None
    gc.collect()
    assert probe() is None
