"""`conveyor worker --app module:app`: runs Python tasks.

One process fetches jobs in batches (GETJOB COUNT n), runs them (in its main thread, or
on a thread pool, `async def` tasks together on an event loop), and acknowledges the
successes in one ACKJOB per batch. A failure is retried by NACK DELAY with backoff; after
the last retry the call goes to the dead-letter queue (`<queue>.dead`). A watchdog thread
sends WORKING for jobs held longer than a third of their RETRY and enforces timeouts.

Timeouts: in the main thread a SIGALRM timer raises TaskTimeout inside the task (it
interrupts sleeps and most blocking calls); in pool threads the watchdog raises it
asynchronously (at the next Python bytecode). Either way the run counts as a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import json
import logging
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from types import FrameType
from typing import Any

from conveyor.client import Client, ConveyorError, Job
from conveyor.worker.tasks import App, Task, call_problem, error_text

log = logging.getLogger("conveyor.worker.tasks")
_FETCH_WAIT_MS = 1000
# A job delivered this many more times than its retries without a result keeps killing its
# worker (segfault, OOM, SIGKILL): it goes to the dead-letter queue instead of looping.
_MAX_EXTRA_DELIVERIES = 5
_ABANDON_AFTER_S = 2.0  # after its timeout, how long a pool thread gets to take the exception
# A run given up on (TaskWorker.abandoned): the watchdog settles it; it is forgotten once
# it is settled and its thread is back, so the table holds only threads still stuck.
_SETTLING, _SETTLED, _BACK_WHILE_SETTLING = 0, 1, 2
# What a task may raise, as its failure: anything. sys.exit() in a task (SystemExit), or a
# class of its own based on BaseException, ended the worker process in its main thread and
# in a pool thread had its job put back and run again at once, no retry spent; signals
# never raise KeyboardInterrupt here (the worker handles INT), so a task raised that too.
_TASK_FAILURES = (BaseException,)


class TaskTimeout(Exception):
    """Raised inside a task that ran past its timeout."""


def load_app(reference: str) -> App:
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"--app wants module:attribute, got {reference!r}")
    sys.path.insert(0, os.getcwd())  # like `python -m`: the app module is found from here
    try:
        app = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load {reference}: {exc}") from None
    if not isinstance(app, App):
        raise ValueError(f"{reference} is a {type(app).__name__}, not a conveyor App")
    if not app.tasks:
        raise ValueError(f"{reference} has no tasks")
    return app


class TaskWorker:
    def __init__(self, app: App, client: Client, threads: int, batch: int, grace: float) -> None:
        self.app = app
        self.client = client
        self.threads = threads
        self.batch = max(1, batch)
        self.grace = grace
        self.queues = app.queues()
        self.stopping = threading.Event()
        self.stop_deadline = float("inf")
        self._held: dict[str, float] = {}  # job ID -> when it was last fetched or beaten
        # Task threads settle (forget) held jobs while the watchdog beats them: without it
        # a beat could hold again a job just NACKed, and put it back at once.
        self._held_lock = threading.Lock()
        # thread id -> (deadline, job, task): what each thread runs, for the watchdog
        self._running: dict[int, tuple[float, Job, Task]] = {}
        # deliveries (see _delivery) given up on while their thread still runs -> _SETTLING,
        # _SETTLED or _BACK_WHILE_SETTLING; at most one per pool thread
        self.abandoned: dict[tuple[str, int, int], int] = {}
        self._pool = ThreadPoolExecutor(threads) if threads > 1 else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._acks: list[str] = []
        self._lock = threading.Lock()

    # -- main loop -------------------------------------------------------------------------
    def run(self) -> int:
        signal.signal(signal.SIGALRM, _raise_timeout)
        threading.Thread(target=self._watchdog, name="watchdog", daemon=True).start()
        while not self.stopping.is_set():
            try:
                jobs = self.client.get_jobs(
                    self.queues, count=self.batch, timeout_ms=_FETCH_WAIT_MS, with_counters=True
                )
            except ConveyorError as exc:
                log.warning("GETJOB failed: %s", exc)
                self.stopping.wait(1.0)
                continue
            if jobs:
                self.run_batch(jobs)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        return 0

    def run_batch(self, jobs: list[Job]) -> None:
        now = time.monotonic()
        with self._held_lock:
            for job in jobs:
                self._held[job.id] = now
        sync_jobs, async_jobs = [], []
        for job in jobs:
            found = self._task_of(job)
            if found is not None:
                (async_jobs if found[0].is_async else sync_jobs).append((job, *found))
        if self._pool is None:
            for job, task, call in sync_jobs:
                if self.stopping.is_set():
                    break  # the rest are put back below
                self._execute(job, task, call)
        else:
            self._run_pooled(self._pool, sync_jobs)
        if async_jobs and not self.stopping.is_set():
            self._run_async(async_jobs)
        self._flush_acks()
        self._put_back()

    def _run_pooled(
        self, pool: ThreadPoolExecutor, triples: list[tuple[Job, Task, dict[str, Any]]]
    ) -> None:
        """Run on the pool; a run the watchdog abandoned (stuck past its timeout in a call
        that an async exception cannot interrupt) is not waited for, but its settling is:
        until then its job is still held, and putting it back (run_batch) would deliver
        it again beside its NACK, to the next free thread."""
        futures = {pool.submit(self._execute, *triple): _delivery(triple[0]) for triple in triples}
        pending = set(futures)
        while pending:
            _done, pending = wait(pending, timeout=0.2)
            pending = {f for f in pending if self.abandoned.get(futures[f]) != _SETTLED}
        # A thread given up on may come back while the watchdog still settles its run.
        while any(self.abandoned.get(d, _SETTLED) != _SETTLED for d in futures.values()):
            time.sleep(0.05)

    def _flush_acks(self) -> None:
        with self._lock:
            acks, self._acks = self._acks, []
        if acks:
            with contextlib.suppress(ConveyorError):  # unacked jobs just come back later
                self.client.ack(*acks)
            for job_id in acks:
                self._forget(job_id)

    def _put_back(self) -> None:
        """Jobs fetched but not run (a stop came): back in the queue, no retry spent."""
        with self._held_lock:
            left = list(self._held)
            self._held.clear()
        if left:
            with contextlib.suppress(ConveyorError):
                self.client.enqueue(*left)

    # -- one job ---------------------------------------------------------------------------
    def _task_of(self, job: Job) -> tuple[Task, dict[str, Any]] | None:
        try:
            call = json.loads(job.body)
            task = self.app.tasks[call["task"]]
        # RecursionError: JSON nested deeper than the stack ("[[[[..."); uncaught, it ended
        # the process, and the job came back to end the next one.
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            self._dead_letter(job, self.app.dead_letter_queue(job.queue), f"bad call: {exc!r}")
            return None
        problem = call_problem(call)
        if problem is not None:  # never runnable: no retry could help
            self._dead_letter(job, self.app.dead_letter_queue(job.queue), f"bad call: {problem}")
            return None
        if (job.additional_deliveries or 0) > task.options.retries + _MAX_EXTRA_DELIVERIES:
            self._dead_letter(job, self.app.dead_letter_queue(job.queue), "delivered too often")
            return None
        return task, call

    def _execute(self, job: Job, task: Task, call: dict[str, Any]) -> None:
        in_main = threading.current_thread() is threading.main_thread()
        try:
            self._call(task, call, in_main, (time.monotonic() + task.options.timeout, job, task))
        except _TASK_FAILURES as exc:  # a task's failure is data, not a worker crash
            if not self._given_up(job):
                self._failed(job, task, exc)
            return
        if self._given_up(job):
            return  # the watchdog settles it as timed out
        with self._lock:
            self._acks.append(job.id)

    def _given_up(self, job: Job) -> bool:
        """Back from a run: whether the watchdog gave it up (and settles it). A settled
        run is forgotten here; one still settling, by the watchdog once it is done."""
        delivery = _delivery(job)
        with self._lock:
            state = self.abandoned.get(delivery)
            if state == _SETTLED:
                del self.abandoned[delivery]
            elif state == _SETTLING:
                self.abandoned[delivery] = _BACK_WHILE_SETTLING
        return state is not None

    def _call(
        self, task: Task, call: dict[str, Any], in_main: bool, running: tuple[float, Job, Task]
    ) -> None:
        """The task itself, listed in _running for the watchdog only while it runs.

        The watchdog raises TaskTimeout into a pool thread only under the lock and only
        while the thread is listed. Unlisted as soon as the task returns, and any timeout
        raised before that taken here, none can land later: in the settling of the job
        (a NACK cut in the middle of its reply) or in the pool's own loop, which would
        end the thread and lose the next job handed to it."""
        ident = threading.get_ident()
        timed_out: TaskTimeout | None = None
        with self._lock:
            self._running[ident] = running
        try:
            if in_main:
                signal.setitimer(signal.ITIMER_REAL, task.options.timeout)
            try:
                task.fn(*call.get("args", ()), **call.get("kwargs", {}))
            finally:
                if in_main:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            while True:
                try:
                    with self._lock:
                        self._running.pop(ident, None)
                    _take_pending()  # one raised before the pop lands here at the latest
                    break
                except TaskTimeout as exc:
                    timed_out = exc
        if timed_out is not None:
            raise timed_out  # it ran past its deadline: a failure, though it returned

    def _run_async(self, pairs: list[tuple[Job, Task, dict[str, Any]]]) -> None:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()

        async def one(job: Job, task: Task, call: dict[str, Any]) -> None:
            try:
                coroutine = task.fn(*call.get("args", ()), **call.get("kwargs", {}))
                await asyncio.wait_for(coroutine, task.options.timeout)
            except _TASK_FAILURES as exc:
                if isinstance(exc, asyncio.TimeoutError):
                    exc = TaskTimeout(f"timed out after {task.options.timeout:g}s")
                self._failed(job, task, exc)
                return
            with self._lock:
                self._acks.append(job.id)

        async def gather() -> None:
            await asyncio.gather(*(one(*triple) for triple in pairs))

        self._loop.run_until_complete(gather())

    def _failed(self, job: Job, task: Task, exc: BaseException) -> None:
        failures = (job.nacks or 0) + 1
        text = error_text(exc)
        try:
            if failures > task.options.retries:
                self._dead_letter(job, self.app.dead_letter_queue(task.options.queue), text)
                return
            delay = task.retry_delay(failures)
            log.info("%s %s failed (%s); retry %d in %ds", task.name, job.id, text, failures, delay)
            self.client.nack(job.id, delay=delay)
        except ConveyorError as exc2:
            log.warning("%s: could not settle a failure: %s", job.id, exc2)
        self._forget(job.id)

    def _dead_letter(self, job: Job, queue: str, error: str) -> None:
        body = {"queue": job.queue, "id": job.id, "body": job.body.decode("utf-8", "replace")}
        body.update(error=error, nacks=job.nacks, failed_at=time.time())
        try:
            self.client.add_job(queue, json.dumps(body).encode())
            self.client.ack(job.id)  # only once the dead letter exists
        except ConveyorError as exc:
            log.warning("%s: dead-letter failed: %s", job.id, exc)
        self._forget(job.id)
        log.warning("%s -> %s: %s", job.id, queue, error)

    def _forget(self, job_id: str) -> None:
        """A held job settled (acked, NACKed, dead-lettered): no more beats for it."""
        with self._held_lock:
            self._held.pop(job_id, None)

    # -- watchdog --------------------------------------------------------------------------
    def _beat(self, now: float, beat_every: float) -> None:
        """WORKING for each held job not beaten for `beat_every`, so that no node requeues
        it while it runs. A job settled meanwhile (each WORKING is a round trip) is
        skipped, never held again."""
        with self._held_lock:
            due = [job_id for job_id, since in self._held.items() if now - since >= beat_every]
        for job_id in due:
            with self._held_lock:
                if job_id not in self._held:
                    continue
                self._held[job_id] = now
            with contextlib.suppress(ConveyorError):
                self.client.working(job_id)

    def _watchdog(self) -> None:
        beat_every = max(1.0, min(t.options.retry for t in self.app.tasks.values()) / 3)
        while True:
            time.sleep(0.2)
            now = time.monotonic()
            self._beat(now, beat_every)
            stuck: list[tuple[Job, Task]] = []
            with self._lock:  # see _call: a thread is raised into only while listed
                for thread_id, (deadline, job, task) in self._running.items():
                    if now <= deadline or thread_id == threading.main_thread().ident:
                        continue
                    if now <= deadline + _ABANDON_AFTER_S:
                        _async_raise(thread_id, TaskTimeout)  # taken at the next bytecode
                    elif _delivery(job) not in self.abandoned:
                        self.abandoned[_delivery(job)] = _SETTLING  # its thread: do not settle
                        stuck.append((job, task))
            for job, task in stuck:
                # Blocked in C (a sleep, a socket): settle the job, leave the thread.
                try:
                    self._failed(job, task, TaskTimeout("stuck past its timeout; abandoned"))
                finally:  # run_batch may go on
                    with self._lock:
                        if self.abandoned.pop(_delivery(job)) == _SETTLING:
                            self.abandoned[_delivery(job)] = _SETTLED  # thread still stuck
            if now > self.stop_deadline:
                log.warning("grace period over: putting %d jobs back", len(self._held))
                self._put_back()
                os._exit(1)

    def request_stop(self) -> None:
        if self.stopping.is_set():
            log.warning("second signal: putting jobs back and exiting at once")
            self._put_back()
            os._exit(1)
        log.info("signal: finishing running work (grace %gs), fetching no more", self.grace)
        self.stopping.set()
        self.stop_deadline = time.monotonic() + self.grace


def _delivery(job: Job) -> tuple[str, int, int]:
    """One delivery of a job: every re-delivery raises nacks or additional deliveries."""
    return job.id, job.nacks or 0, job.additional_deliveries or 0


def _take_pending() -> None:
    """Nothing: calling a Python function is where a pending async exception is raised."""


def _raise_timeout(signum: int, frame: FrameType | None) -> None:
    raise TaskTimeout("the task ran past its timeout")


def _async_raise(thread_id: int, exc_type: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type)
    )


def serve_app(
    reference: str, nodes: list[str], processes: int, threads: int, grace: float, batch: int
) -> int:
    if processes < 1 or threads < 1:
        raise ValueError("--processes and --threads must be >= 1")
    app = load_app(reference)
    if processes > 1:
        from conveyor.worker.supervisor import supervise

        return supervise(reference, nodes, processes, threads, grace, batch)
    client = Client(nodes, socket_timeout=30)
    client.connect()
    worker = TaskWorker(app, client, threads, batch, grace)
    signal.signal(signal.SIGTERM, lambda *_: worker.request_stop())
    signal.signal(signal.SIGINT, lambda *_: worker.request_stop())
    from conveyor.worker.service import start_periodic

    start_periodic(app, client, worker.stopping)
    log.info("running %d tasks from %s on %s", len(app.tasks), reference, client.address)
    code = worker.run()
    if worker.abandoned:
        logging.shutdown()
        os._exit(code)  # abandoned threads are still blocked: do not wait for them
    return code
