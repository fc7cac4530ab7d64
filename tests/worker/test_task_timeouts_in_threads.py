"""Timeouts of tasks on the pool (conveyor/worker/taskworker.py): the watchdog's exception
lands in its task and nowhere else, and a run it gives up on is settled before the batch
ends.

The watchdog raises TaskTimeout into a pool thread that runs past its deadline. Raised
while the thread was already settling the job (the NACK of its failure), it would cut
that exchange in the middle; raised once the thread was back in the pool's loop, it would
end the thread and lose the next job handed to it: the worker then waited for it forever
. And a batch ended as soon as the watchdog gave up on a stuck run, before it had
settled it: the job, still held, was put back at once, ran a third time and took the last
free thread (seen as a flaky `test_timeout_stops_the_task_and_retries_it[2]` under load).
Runs a TaskWorker in this process against a real node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from conveyor.client import Client, Job
from conveyor.worker.tasks import App, Task
from conveyor.worker.taskworker import TaskWorker
from tests.servers import NodeProcess, running_node
from tests.worker.conftest import wait_for


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with running_node(tmp_path_factory.mktemp("node")) as started:
        yield started


class SlowSettling(TaskWorker):
    """Settles a failure slowly, as a NACK does on a loaded machine, and records what
    reaches the settling and what escapes it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.settled: list[str] = []
        self.escaped: list[BaseException] = []

    def _failed(self, job: Job, task: Task, exc: BaseException) -> None:
        try:
            time.sleep(1.0)  # five watchdog rounds, all past the deadline
            self.settled.append(type(exc).__name__)
            super()._failed(job, task, exc)
        except BaseException as escaped:
            self.escaped.append(escaped)
            raise


def watched_worker(app: App, client: Client) -> SlowSettling:
    """Two pool threads and the watchdog (a daemon thread: it idles once nothing is held)."""
    worker = SlowSettling(app, client, 2, 1, 5.0)
    threading.Thread(target=worker._watchdog, daemon=True).start()
    return worker


def fetch(client: Client, queue: str) -> list[Job]:
    return client.get_jobs([queue], count=1, timeout_ms=5000, with_counters=True)


def spin_past_timeout() -> None:
    # Python bytecode, not a C sleep: the watchdog's exception lands at once.
    end = time.monotonic() + 5
    while time.monotonic() < end:
        pass


def test_a_timeout_is_not_raised_again_while_the_thread_settles_the_job(
    node: NodeProcess,
) -> None:
    nodes = [f"127.0.0.1:{node.port}"]
    app = App(nodes, default_queue="spin")
    task = app.task(retries=0, timeout=0.3)(spin_past_timeout)
    with Client(nodes) as client:
        worker = watched_worker(app, client)
        task.delay()
        worker.run_batch(fetch(client, "spin"))  # returns once the pool ran it
        assert worker.settled == ["TaskTimeout"]
        assert worker.escaped == []  # no second TaskTimeout in the middle of settling
        dead = fetch(client, "spin.dead")
        assert len(dead) == 1 and b"TaskTimeout" in dead[0].body
        # The pool's threads are alive: the next job runs (and is acked).
        follow = app.task(name="follow", queue="spin", retries=0, timeout=5)(lambda: None)
        follow.delay()
        worker.run_batch(fetch(client, "spin"))
        assert client.qlen("spin") == 0 and worker._running == {}
        assert all(thread.is_alive() for thread in worker._pool._threads)  # type: ignore[union-attr]


def sleep_past_timeout() -> None:
    time.sleep(3)  # in C: the exception waits for it, so the watchdog gives the run up


def test_a_run_given_up_on_is_settled_before_its_batch_ends(node: NodeProcess) -> None:
    nodes = [f"127.0.0.1:{node.port}"]
    app = App(nodes, default_queue="stuck")
    task = app.task(retries=0, timeout=0.3)(sleep_past_timeout)
    with Client(nodes) as client:
        worker = watched_worker(app, client)
        job_id = task.delay()
        worker.run_batch(fetch(client, "stuck"))
        # Settled (dead-lettered, acked) before run_batch put back what it still held.
        assert worker.settled == ["TaskTimeout"] and worker.escaped == []
        assert client.qlen("stuck") == 0 and client.show(job_id) is None
        dead = fetch(client, "stuck.dead")
        assert len(dead) == 1 and b"abandoned" in dead[0].body
        # Once its thread is back, nothing is kept for the run (one entry per stuck thread).
        wait_for(lambda: not worker.abandoned, timeout=10, what="the run forgotten")


def test_a_beat_never_holds_again_a_job_settled_meanwhile(node: NodeProcess) -> None:
    """The watchdog beats (WORKING) the held jobs one round trip at a time; a job a task
    thread settles meanwhile (its failure NACKed with a retry delay) must not be held
    again, or the next batch's put-back would ENQUEUE it at once and skip its delay."""
    nodes = [f"127.0.0.1:{node.port}"]
    app = App(nodes, default_queue="beat")
    app.task(retries=3)(spin_past_timeout)
    with Client(nodes) as client:
        for _ in range(2):
            client.add_job("beat", b"{}")
        first, second = (job.id for job in client.get_jobs(["beat"], count=2, timeout_ms=5000))
        worker = TaskWorker(app, client, 1, 2, 5.0)
        worker._held.update({first: 0.0, second: 0.0})
        beat = client.working

        def working_while_second_settles(job_id: str) -> int:
            if job_id == first:  # another thread settles the second job meanwhile
                client.nack(second, delay=60)
                worker._forget(second)
            return beat(job_id)

        client.working = working_while_second_settles  # type: ignore[method-assign]
        worker._beat(time.monotonic(), beat_every=0.0)
        assert list(worker._held) == [first]
        worker._put_back()
        assert client.qlen("beat") == 1  # the first, put back; the second keeps its delay
