"""Python tasks: `App`, `@app.task`, `f.delay(...)`, `f.apply_async(...)`, `@app.periodic`.

A task call is a job on the task's queue whose body is JSON:
`{"task": name, "args": [...], "kwargs": {...}}`. Arguments must be JSON-serialisable.
"""

from __future__ import annotations

import functools
import inspect
import json
import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from conveyor.client import Client
from conveyor.worker import claims

_COMMIT_TTL_S = 7 * 86400
# A failure's text goes into a log line and a dead letter: a megabyte message is cut.
MAX_ERROR_CHARS = 4096


@dataclass(frozen=True)
class TaskOptions:
    queue: str
    retries: int  # failures retried before the dead-letter queue (0: none)
    backoff: float  # first retry delay in seconds, doubled each time
    backoff_max: float
    jitter: bool
    timeout: float  # seconds a run may take before it is stopped and retried
    retry: int  # the job's RETRY: seconds before a dead worker's job is delivered again


class Task:
    """A registered function. Calling it runs it here; `delay`/`apply_async` enqueue it."""

    def __init__(self, app: App, fn: Callable[..., Any], name: str, options: TaskOptions) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.options = options
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def delay(self, *args: Any, **kwargs: Any) -> str:
        return self.apply_async(args, kwargs)

    def apply_async(
        self, args: tuple[Any, ...] | list[Any] = (), kwargs: dict[str, Any] | None = None, *,
        countdown: float | None = None, eta: datetime | None = None, job_id: str | None = None,
    ) -> str:  # fmt: skip
        """Enqueue a call; the node's job ID. `job_id` is an idempotency key: a second call
        with the same key adds nothing and returns the first call's job ID."""
        body = encode_call(self.name, args, kwargs or {})
        delay = _delay_seconds(countdown, eta)
        client = self.app.client
        if job_id is None:
            return self._add(client, body, delay)
        record = claims.claim_queue("task", self.options.queue, job_id)
        if claims.try_claim(client, record, "pending", _COMMIT_TTL_S) is None:
            return _wait_committed(client, record)
        new_id = self._add(client, body, delay)
        client.add_job(record, f"commit {new_id}".encode(), ttl=_COMMIT_TTL_S)
        return new_id

    def _add(self, client: Client, body: bytes, delay: int) -> str:
        return client.add_job(
            self.options.queue, body, delay=delay or None, retry=self.options.retry
        )

    def retry_delay(self, failures: int) -> int:
        """Exponential backoff with jitter, whole seconds (NACK DELAY's unit), at least 1."""
        delay = min(self.options.backoff * (2 ** max(0, failures - 1)), self.options.backoff_max)
        if self.options.jitter:
            delay *= random.uniform(0.5, 1.0)  # spread retries of a burst of failures
        return max(1, round(delay))


def encode_call(name: str, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> bytes:
    try:
        return json.dumps({"task": name, "args": list(args), "kwargs": kwargs}).encode()
    except (TypeError, ValueError) as exc:
        raise TypeError(f"task {name}: arguments must be JSON-serialisable: {exc}") from None


def call_problem(call: dict[str, Any]) -> str | None:
    """What makes a decoded call impossible to make, if anything."""
    args, kwargs = call.get("args", []), call.get("kwargs", {})
    if not isinstance(args, list):
        return f"'args' must be a list, got {type(args).__name__}"
    if not isinstance(kwargs, dict):
        return f"'kwargs' must be an object, got {type(kwargs).__name__}"
    return None


def error_text(exc: BaseException) -> str:
    """`Type: message` of a task's failure, at most MAX_ERROR_CHARS (and what was cut)."""
    try:  # an exception with no str() is handled there; this guards what else might fail
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    except Exception:
        text = f"{type(exc).__name__}: <no text>"
    if len(text) > MAX_ERROR_CHARS:
        text = f"{text[:MAX_ERROR_CHARS]}... ({len(text) - MAX_ERROR_CHARS:,} more characters)"
    return text


def _delay_seconds(countdown: float | None, eta: datetime | None) -> int:
    if countdown is not None and eta is not None:
        raise ValueError("give countdown or eta, not both")
    if eta is not None:
        when = eta if eta.tzinfo else eta.replace(tzinfo=UTC)
        countdown = when.timestamp() - time.time()
    return max(0, round(countdown or 0))


def _wait_committed(client: Client, record: str) -> str:
    # Another call with the same job_id won the claim; its commit follows within moments.
    for _ in range(100):
        for job in client.qpeek(record, 10):
            text = job.body.decode("utf-8", "replace")
            if text.startswith("commit "):
                return text.split(" ", 1)[1]
        time.sleep(0.05)
    raise TimeoutError(f"job_id {record}: the first call never committed")


class App:
    """The registry of tasks and the connection they are enqueued on.

    >>> app = App(nodes=["127.0.0.1:7711"])
    >>> @app.task(queue="emails", retries=5, timeout=30)
    ... def send(to: str) -> None: ...
    >>> send.delay("ada@example.org")  # doctest: +SKIP
    """

    def __init__(
        self, nodes: list[str] | str | None = None, *, default_queue: str = "tasks",
        default_timeout: float = 300.0, default_retries: int = 3,
        dead_letter_suffix: str = ".dead",
    ) -> None:  # fmt: skip
        self.nodes = nodes
        self.default_queue = default_queue
        self.default_timeout = default_timeout
        self.default_retries = default_retries
        self.dead_letter_suffix = dead_letter_suffix
        self.tasks: dict[str, Task] = {}
        self.periodic_tasks: list[tuple[str, Task]] = []
        self._client: Client | None = None
        self._lock = threading.Lock()

    @property
    def client(self) -> Client:
        with self._lock:
            if self._client is None:
                self._client = Client(self.nodes)
            return self._client

    def dead_letter_queue(self, queue: str) -> str:
        return queue + self.dead_letter_suffix

    def task(
        self, fn: Callable[..., Any] | None = None, *, name: str | None = None,
        queue: str | None = None, retries: int | None = None, backoff: float = 1.0,
        backoff_max: float = 600.0, jitter: bool = True, timeout: float | None = None,
        retry: int | None = None,
    ) -> Any:  # fmt: skip
        """Register a task: `@app.task` or `@app.task(queue=..., retries=..., ...)`."""

        def register(function: Callable[..., Any]) -> Task:
            task_name = name or f"{function.__module__}.{function.__qualname__}"
            run_timeout = self.default_timeout if timeout is None else timeout
            if run_timeout <= 0 or backoff <= 0:
                raise ValueError(f"task {task_name}: timeout and backoff must be > 0")
            options = TaskOptions(
                queue=queue or self.default_queue,
                retries=self.default_retries if retries is None else retries,
                backoff=backoff,
                backoff_max=backoff_max,
                jitter=jitter,
                timeout=run_timeout,
                retry=retry or 30,
            )
            created = Task(self, function, task_name, options)
            self.tasks[task_name] = created
            return created

        return register(fn) if fn is not None else register

    def periodic(self, cron: str, **task_options: Any) -> Callable[[Callable[..., Any]], Task]:
        """`@app.periodic("*/5 * * * *")`: a task enqueued (no arguments) on every tick."""
        from conveyor.worker.cron import validate_cron

        validate_cron(cron)

        def register(function: Callable[..., Any]) -> Task:
            created: Task = self.task(function, **task_options)
            self.periodic_tasks.append((cron, created))
            return created

        return register

    def queues(self) -> list[str]:
        return sorted({t.options.queue for t in self.tasks.values()})
