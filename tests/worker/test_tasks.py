"""Python tasks through a real `conveyor worker --app` process."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.client import Client
from tests.servers import NodeProcess, running_node
from tests.worker import task_app
from tests.worker.conftest import WorkerProcess, wait_for

APP = "tests.worker.task_app:app"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    # A node per test: queue "t" and its dead letters start empty every time.
    with running_node(tmp_path / "node") as started:
        address = f"127.0.0.1:{started.port}"
        os.environ["CONVEYOR_TEST_NODES"] = address
        task_app.app.nodes = address
        task_app.app._client = None
        yield started
        os.environ.pop("CONVEYOR_TEST_NODES", None)


def results(client: Client, name: str | None = None) -> list[list[Any]]:
    found = [json.loads(job.body) for job in client.qpeek(task_app.RESULTS, 1000)]
    return [r for r in found if name is None or r[0] == name]


def dead_letters(client: Client) -> list[dict[str, Any]]:
    return [json.loads(job.body) for job in client.qpeek("t.dead", 100)]


def test_direct_call_delay_and_apply_async(
    client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    task_app.record(-1)  # runs here, now
    assert results(client, "record") == [["record", -1]]
    task_app.record.delay(1)
    first = task_app.record.apply_async([2], job_id="order-2")
    assert task_app.record.apply_async([2], job_id="order-2") == first  # idempotent
    task_app.record.apply_async([3], countdown=1)
    task_app.async_record.delay(4)
    with pytest.raises(TypeError, match="JSON-serialisable"):
        task_app.record.delay(object())
    start_worker("--app", APP, "--threads", "2")
    wait_for(lambda: len(results(client)) == 5, what="four runs")
    values = sorted(r[1] for r in results(client))
    assert values == [-1, 1, 2, 3, 4]
    wait_for(lambda: client.qlen("t") == 0)


def test_retries_back_off_then_dead_letter(
    client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    task_app.always_fails.delay("x")
    start_worker("--app", APP)
    dead = wait_for(lambda: dead_letters(client), timeout=30, what="a dead letter")
    runs = [r[2] for r in results(client, "always_fails")]
    assert len(runs) == 3  # the first run and retries=2
    # NACK DELAY with backoff 1 s doubled: the gaps are at least 1 s then 2 s.
    assert runs[1] - runs[0] >= 1.0 and runs[2] - runs[1] >= 2.0
    assert dead[0]["error"] == "RuntimeError: failing on purpose: x"
    assert json.loads(dead[0]["body"])["args"] == ["x"]
    assert client.qlen("t") == 0


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_task_calling_sys_exit_is_a_failure_not_the_workers_end(
    client: Client, start_worker: Callable[..., WorkerProcess], threads: str
) -> None:
    task_app.exits.delay("x")
    worker = start_worker("--app", APP, "--threads", threads)
    dead = wait_for(lambda: dead_letters(client), timeout=30, what="a dead letter")
    assert dead[0]["error"] == "SystemExit: 3"
    assert len(results(client, "exits")) == 2  # the first run and retries=1
    assert worker.process.poll() is None  # still serving


@pytest.mark.parametrize("threads", ["1", "2"])
def test_timeout_stops_the_task_and_retries_it(
    client: Client, start_worker: Callable[..., WorkerProcess], threads: str
) -> None:
    task_app.sleeps_past_timeout.delay("y")
    start_worker("--app", APP, "--threads", threads)
    dead = wait_for(lambda: dead_letters(client), timeout=30, what="a dead letter")
    assert "TaskTimeout" in dead[0]["error"]
    assert len(results(client, "sleeps_start")) == 2  # the run and its one retry
    assert results(client, "sleeps_end") == []  # both runs were stopped mid-sleep


def test_term_finishes_the_running_job_and_exits(
    client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    client.pause("t", "out")  # the three jobs arrive in one batch
    task_app.slow.delay("a", 2)
    task_app.record.delay(1)
    task_app.record.delay(2)
    worker = start_worker("--app", APP)
    client.pause("t", "none")
    wait_for(lambda: results(client, "slow_start"), what="the slow task to start")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert results(client, "slow_end") == [["slow_end", "a"]]
    # The batch's other jobs were not started: put back, not lost, no retry spent.
    assert client.qlen("t") == 2
    assert all(job.nacks == 0 for job in client.get_jobs("t", 2, with_counters=True))


def test_second_term_exits_at_once_and_the_job_comes_back(
    client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    task_app.slow.delay("b", 30)
    worker = start_worker("--app", APP)
    wait_for(lambda: results(client, "slow_start"), what="the slow task to start")
    worker.signal(signal.SIGTERM)
    wait_for(lambda: "finishing running work" in worker.output(), what="the first TERM")
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) != 0  # well before the 30 s task could end
    assert results(client, "slow_end") == []
    back = wait_for(lambda: client.qpeek("t", 1), what="the job back in its queue")
    assert json.loads(back[0].body)["args"] == ["b", 30]


def test_a_call_nested_too_deeply_is_dead_lettered(
    client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    # json.loads raises RecursionError, not ValueError: it used to end the worker process,
    # and the job, delivered again, ended the next one.
    client.add_job("t", b"[" * 100_000)
    task_app.record.delay(7)
    worker = start_worker("--app", APP)
    [dead] = wait_for(lambda: dead_letters(client), 20, "the dead letter")
    assert dead["error"].startswith("bad call: RecursionError(")
    wait_for(lambda: results(client, "record") == [["record", 7]], 20, "the good call run")
    assert worker.process.poll() is None, worker.output()


def test_processes_and_unknown_tasks(
    client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    for value in range(20):
        task_app.record.delay(value)
    client.add_job("t", b'{"task": "no.such.task", "args": []}')
    client.add_job("t", b"not json")
    start_worker("--app", APP, "--processes", "2", "--batch", "4")
    wait_for(lambda: len(results(client, "record")) == 20, what="20 runs")
    wait_for(lambda: len(dead_letters(client)) == 2, what="2 dead letters")
    assert sorted(r[1] for r in results(client, "record")) == list(range(20))


@pytest.mark.parametrize("threads", ["1", "2"])
def test_odd_failures_and_results_are_recorded_and_the_worker_serves_on(
    client: Client, start_worker: Callable[..., WorkerProcess], threads: str
) -> None:
    """A BaseException that is no Exception (it ended the worker in its main thread, and
    in a pool thread its job was put back and run again and again), an exception with no
    text, one a megabyte long (sent whole into the dead letter and the log), a call whose
    arguments are no list (retried as if the task had failed), a result that is no JSON."""
    task_app.raises_base.delay("b")
    task_app.raises_unprintable.delay()
    task_app.raises_huge.delay()
    noop = task_app.noop.name
    client.add_job("t", json.dumps({"task": noop, "args": 5}).encode())
    client.add_job("t", json.dumps({"task": noop, "kwargs": ["a"]}).encode())
    task_app.returns_odd.delay("r")
    worker = start_worker("--app", APP, "--threads", threads)
    dead = wait_for(lambda: len(letters := dead_letters(client)) == 5 and letters, 30, "5 letters")
    [huge, *errors] = sorted(letter["error"] for letter in dead)  # "V" sorts before "b"
    assert errors == [
        "bad call: 'args' must be a list, got int",
        "bad call: 'kwargs' must be an object, got list",
        "tests.worker.task_app.Fatal: b",
        "tests.worker.task_app.Unprintable: <exception str() failed>",
    ]
    assert huge.startswith("ValueError: xxx") and huge.endswith("(995,916 more characters)")
    assert len(huge) < 5000
    assert results(client, "returns_odd") == [["returns_odd", "r"]]
    task_app.record.delay(8)
    wait_for(lambda: results(client, "record") == [["record", 8]], 20, "the next call run")
    assert client.qlen("t") == 0 and worker.process.poll() is None, worker.output()
