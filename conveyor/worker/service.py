"""The `conveyor worker` process for queue directories: runners, schedules, the cleaner and
signal handling."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType

from conveyor.client import Client
from conveyor.worker.cron import Scheduler, ScheduleSpec
from conveyor.worker.envelope import Envelope
from conveyor.worker.queuedir import MessageStore, QueueConfig
from conveyor.worker.registry import Latency, Registry
from conveyor.worker.runner import QueueRunner
from conveyor.worker.script import KILL_GRACE_S, signal_group
from conveyor.worker.tasks import App, Task
from conveyor.worker.webhooks import WebhookSender

log = logging.getLogger("conveyor.worker")
_TICK_S = 1.0  # how often schedules and the cleaner are looked at
_CLEAN_EVERY_S = 60.0
_PUT_BACK_S = 5.0  # for slots whose runs were ended to put their messages back


def add_message(client: Client, config: QueueConfig, envelope: Envelope, delay: int = 0) -> str:
    """The one way a message enters a script queue (CLI, console, schedules)."""
    envelope.due_at = time.time() + delay
    return client.add_job(config.name, envelope.to_json(), delay=delay or None, retry=config.retry)


def schedule_specs(client: Client, configs: list[QueueConfig]) -> list[ScheduleSpec]:
    specs = []
    for config in configs:
        for entry in config.schedule:
            key = "|".join(
                [config.name, entry.cron, *sorted(f"{k}={v}" for k, v in entry.params.items())]
            )

            def enqueue(
                tick: int,
                delay: int,
                config: QueueConfig = config,
                params: dict[str, str] = entry.params,
            ) -> str:
                envelope = Envelope(params=dict(params), origin="cron", tick=tick)
                return add_message(client, config, envelope, delay)

            specs.append(ScheduleSpec(key, entry.cron, config.name, enqueue))
    return specs


class SignalStop:
    """First TERM/INT: stop fetching and let running work finish (within the grace period);
    second: exit at once."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.event.is_set():
            log.warning("second signal: exiting at once")
            os._exit(1)
        log.info("signal %d: finishing running work, fetching no more", signum)
        self.event.set()


def serve_queues(
    directories: list[Path], nodes: list[str], grace: float,
    webhook_attempts: int = 8, webhook_backoff: float = 1.0,
) -> int:  # fmt: skip
    configs = [QueueConfig.load(d) for d in directories]
    stop = SignalStop()
    stop.install()
    client = Client(nodes, socket_timeout=30)
    client.connect()
    webhooks = WebhookSender(webhook_attempts, webhook_backoff)
    latency = Latency()
    runners = [QueueRunner(c, client, stop.event, webhooks, latency) for c in configs]
    for runner in runners:
        runner.start()
    registry = Registry([c.directory for c in configs])
    scheduler = Scheduler(client, schedule_specs(client, configs), runners[0].owner)
    stores = [(MessageStore(c.directory), c.keep_done) for c in configs]
    last_clean = 0.0
    log.info("serving %s on %s", ", ".join(c.name for c in configs), client.address)
    try:
        while not stop.event.is_set():
            _obey(registry, runners, stop.event)
            registry.write([r.status() for r in runners], latency.doc(), held(webhooks, scheduler))
            if scheduler.specs and registry.state == "running":
                scheduler.run_once()
            if time.monotonic() - last_clean >= _CLEAN_EVERY_S:
                last_clean = time.monotonic()
                for store, keep in stores:
                    store.clean(keep)
            stop.event.wait(_TICK_S)
        registry.state = "stopping"
        registry.write([r.status() for r in runners], latency.doc(), held(webhooks, scheduler))
        deadline = time.monotonic() + grace
        for runner in runners:
            runner.join(max(0.0, deadline - time.monotonic()))
        _interrupt(runners)
        for runner in runners:
            runner.close(deadline - time.monotonic())
        # Not within the grace: a dead endpoint may not hold up the exit (webhooks.STOP_S).
        webhooks.close()
    finally:
        registry.remove()
        client.close()
    return 0


def held(webhooks: WebhookSender, scheduler: Scheduler) -> dict[str, int]:
    """The worker-wide part of its record's `held`: webhook deliveries not finished, and
    the schedule ticks remembered (per queue: `busy`, `running` and `acks_pending`)."""
    return {"webhooks_pending": webhooks.pending(), "schedule_ticks": scheduler.remembered()}


def _interrupt(runners: list[QueueRunner]) -> None:
    """Scripts still running when the grace period is over: TERM, KILL what is left of
    their groups 2 s later; their slots put the messages back. Left alone, they ran on
    unwatched after the worker's exit, their jobs held until RETRY brought them back."""
    groups = [pgid for runner in runners for pgid in runner.interrupt()]
    if not groups:
        return
    deadline = time.monotonic() + KILL_GRACE_S
    for runner in runners:
        runner.join(max(0.0, deadline - time.monotonic()))
    for pgid in groups:
        signal_group(pgid, signal.SIGKILL)
    for runner in runners:
        runner.join(_PUT_BACK_S)


def _obey(registry: Registry, runners: list[QueueRunner], stop: threading.Event) -> None:
    """A `quiet` or `stop` the console asked for (conveyor.worker.registry)."""
    word = registry.control()
    if word == "stop":
        log.info("the console asked this worker to stop")
        stop.set()
    elif word == "quiet" and registry.state == "running":
        log.info("the console asked this worker to go quiet: no new messages")
        registry.state = "quiet"
        for runner in runners:
            runner.quiet.set()


def start_periodic(app: App, client: Client, stop: threading.Event) -> None:
    """A thread enqueueing the app's `@app.periodic` tasks on their ticks (see cron)."""
    if not app.periodic_tasks:
        return
    specs = []
    for cron, task in app.periodic_tasks:

        def enqueue(tick: int, delay: int, task: Task = task) -> str:
            return task.apply_async(countdown=delay)

        specs.append(ScheduleSpec(f"task|{task.name}|{cron}", cron, task.options.queue, enqueue))
    scheduler = Scheduler(client, specs, f"{os.uname().nodename}:{os.getpid()}")

    def loop() -> None:
        while not stop.is_set():
            scheduler.run_once()
            stop.wait(_TICK_S)

    threading.Thread(target=loop, name="periodic", daemon=True).start()
