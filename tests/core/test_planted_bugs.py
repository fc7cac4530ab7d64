"""Each resource invariant of the state machine catches a bug planted by hand.

An invariant that cannot fail proves nothing: every test here swaps one small piece of
the core for a broken version (the leaks found in review, or a dropped job event), runs
the state machine of test_engine_properties with a fixed seed, and requires the failure
to name the invariant meant to catch it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from conveyor.core.blocking import BlockingMixin
from conveyor.core.job import ACTIVE
from conveyor.core.queue import JobQueue
from conveyor.core.queueing import QueueingMixin
from conveyor.core.waiters import Waiter
from tests.core.test_engine_properties import EngineMachine

_SETTINGS = settings(
    max_examples=400,
    stateful_step_count=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=False,
)


def _leave_without_gc(self: Any, queue: JobQueue, waiter: Waiter, now_ms: int) -> None:
    # The bug found in review: leaving the waiter list never re-armed queue GC.
    queue.blocked -= 1
    waiters = queue.waiters
    while waiters and waiters[0] is waiter:
        waiters.popleft()
    while waiter in waiters:
        waiters.remove(waiter)


def _leave_from_front_only(self: Any, queue: JobQueue, waiter: Waiter, now_ms: int) -> None:
    # The bug found in review: only finished waiters at the front were ever purged.
    queue.blocked -= 1
    waiters = queue.waiters
    while waiters and waiters[0].done:
        waiters.popleft()
    if not queue.blocked:
        self._arm_queue_gc(queue, now_ms)


def _keep_timeout(self: Any, waiter: Waiter) -> None:
    # The bug found in review: a served waiter's timeout entry stayed until it was due.
    pass


def _dequeue_silently(self: Any, job: Any, now_ms: int) -> None:
    # A state change that skips the one function every change must go through.
    job.state = ACTIVE
    self._left_queue(job, now_ms)


@pytest.mark.parametrize(
    ("owner", "method", "broken", "invariant"),
    [
        (
            BlockingMixin,
            "_leave_waiters",
            _leave_without_gc,
            "idle_empty_queues_are_collected_within_their_gc_time",
        ),
        (
            BlockingMixin,
            "_leave_waiters",
            _leave_from_front_only,
            "waiter_lists_hold_only_live_waiters",
        ),
        (BlockingMixin, "_cancel_timeout", _keep_timeout, "no_timer_keeps_a_finished_waiter"),
        (
            QueueingMixin,
            "_dequeue",
            _dequeue_silently,
            "job_events_replay_to_the_engine_state",
        ),
    ],
)
def test_invariant_catches_planted_bug(
    monkeypatch: pytest.MonkeyPatch,
    owner: type,
    method: str,
    broken: Callable[..., None],
    invariant: str,
) -> None:
    monkeypatch.setattr(owner, method, broken)
    with pytest.raises(AssertionError) as failure:
        run_state_machine_as_test(EngineMachine, settings=_SETTINGS)
    frames = [entry.name for entry in failure.traceback]
    assert invariant in frames, f"caught by {frames[-3:]}, not by {invariant}"
