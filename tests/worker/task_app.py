"""Tasks for the worker tests. Each reports by adding a job to a results queue, so a test
reads what ran from the node itself. Nodes come from CONVEYOR_TEST_NODES."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time

from conveyor.worker import App

app = App(nodes=os.environ.get("CONVEYOR_TEST_NODES", "127.0.0.1:7711"), default_queue="t")
RESULTS = "t.results"


def report(name: str, *values: object) -> None:
    app.client.add_job(RESULTS, json.dumps([name, *values]).encode())


@app.task
def noop() -> None:
    pass


@app.task(queue="t")
def record(value: int) -> None:
    report("record", value)


@app.task(queue="t", retries=2, backoff=1, jitter=False)
def always_fails(tag: str) -> None:
    report("always_fails", tag, time.time())
    raise RuntimeError(f"failing on purpose: {tag}")


@app.task(queue="t", retries=1, backoff=1, jitter=False, timeout=1)
def sleeps_past_timeout(tag: str) -> None:
    report("sleeps_start", tag)
    time.sleep(30)
    report("sleeps_end", tag)  # never reached: the timeout stops it


@app.task(queue="t", timeout=60)
def slow(tag: str, seconds: float) -> None:
    report("slow_start", tag)
    time.sleep(seconds)
    report("slow_end", tag)


@app.task(queue="t")
async def async_record(value: int) -> None:
    await asyncio.sleep(0.01)
    report("async_record", value)


@app.task(queue="t", retries=1, backoff=1, jitter=False)
def exits(tag: str) -> None:
    report("exits", tag)
    sys.exit(3)


class Fatal(BaseException):
    """Not an Exception, and not picklable (it holds a lock): still only a task's failure."""

    def __init__(self, tag: str) -> None:
        super().__init__(tag)
        self.lock = threading.Lock()


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for this one")


@app.task(queue="t", retries=0)
def raises_base(tag: str) -> None:
    raise Fatal(tag)


@app.task(queue="t", retries=0)
def raises_unprintable() -> None:
    raise Unprintable()


@app.task(queue="t", retries=0)
def raises_huge() -> None:
    raise ValueError("x" * 1_000_000)


@app.task(queue="t")
def returns_odd(tag: str) -> object:
    report("returns_odd", tag)
    return {object(), b"\xff"}  # no JSON, no pickle: a result is not kept, so no matter
