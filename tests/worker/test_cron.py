"""Schedules: at most one message per tick however many processes carry the schedule."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor.client import Client
from conveyor.worker.cron import Scheduler, ScheduleSpec, ticks_between, validate_cron
from conveyor.worker.envelope import Envelope
from conveyor.worker.queuedir import QueueConfig, QueueConfigError
from conveyor.worker.service import schedule_specs
from tests.servers import NodeProcess
from tests.worker.conftest import WorkerProcess, make_queue, wait_for, write_script

T0 = 1_800_000_000 - 1_800_000_000 % 60  # a whole minute, UTC


class VirtualClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _ticks_in_queue(client: Client, queue: str) -> list[int]:
    ticks = []
    for job_id in client.scan_jobs(queue):
        shown = client.show(job_id)
        assert shown is not None
        ticks.append(Envelope.from_json(shown["body"]).tick)
    return sorted(t for t in ticks if t is not None)


def test_ticks_between() -> None:
    assert ticks_between("* * * * *", T0, T0 + 180) == [T0 + 60, T0 + 120, T0 + 180]
    assert ticks_between("*/5 * * * *", T0 - 1, T0) == [T0]
    with pytest.raises(ValueError, match="bad cron expression"):
        validate_cron("61 * * * *")


def test_a_cron_no_date_matches_is_refused_and_never_stops_the_others(
    node: NodeProcess, tmp_path: Path
) -> None:
    # Feb 30 and Apr 31 are valid syntax; croniter only fails when asked for a date.
    for never in ("0 0 30 2 *", "0 0 31 4 *"):
        with pytest.raises(ValueError, match=r"bad cron expression .*no date ever matches"):
            validate_cron(never)
    validate_cron("0 0 29 2 *")  # Feb 29 comes every four years
    make_queue(tmp_path, "feb30", "/bin/true", schedule=[{"cron": "0 0 30 2 *"}])
    with pytest.raises(QueueConfigError, match="bad cron expression"):
        QueueConfig.load(tmp_path / "feb30")
    # One that got past validation (an older config, a changed croniter) is skipped and
    # logged; the schedule beside it still gets its tick.
    added: list[int] = []
    specs = [
        ScheduleSpec("never", "0 0 30 2 *", "cron_never", lambda t, d: "x"),
        ScheduleSpec("every", "* * * * *", "cron_every", lambda t, d: str(added.append(t))),
    ]
    with Client([f"127.0.0.1:{node.port}"]) as client:
        Scheduler(client, specs, "me", VirtualClock(T0 + 1)).run_once()
    assert added == [T0 + 60]


def test_two_schedulers_one_message_per_tick_virtual_clock(
    node: NodeProcess, tmp_path: Path
) -> None:
    queue_dir = make_queue(tmp_path, "cron_v", "/bin/true", schedule=[{"cron": "* * * * *"}])
    config = QueueConfig.load(queue_dir)
    clock = VirtualClock(T0 + 1)
    schedulers = []
    clients = []
    for owner in ("host-a:1", "host-b:2"):
        client = Client([f"127.0.0.1:{node.port}"])
        clients.append(client)
        schedulers.append(Scheduler(client, schedule_specs(client, [config]), owner, clock))
    # Three virtual minutes in 5 s steps; both schedulers run each step at the same time.
    for _ in range(36):
        threads = [threading.Thread(target=s.run_once) for s in schedulers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        clock.now += 5
    ticks = _ticks_in_queue(clients[0], "cron_v")
    # The last step ran at T0 + 176, so ticks were claimed up to T0 + 236: three minutes,
    # three messages, each exactly once (a double claim would show a tick twice).
    assert ticks == [T0 + 60 * k for k in range(1, 4)]
    # A third process arriving late (a restart) adds nothing for ticks already claimed.
    late = Scheduler(clients[0], schedule_specs(clients[0], [config]), "host-c:3", clock)
    clock.now = T0 + 61
    assert late.run_once() == []
    for client in clients:
        client.close()


def test_paused_queue_gets_no_scheduled_messages(node: NodeProcess) -> None:
    added: list[int] = []
    with Client([f"127.0.0.1:{node.port}"]) as client:
        client.pause("cron_paused", "in")
        spec = ScheduleSpec(
            "cron_paused|* * * * *", "* * * * *", "cron_paused", lambda t, d: str(added.append(t))
        )
        scheduler = Scheduler(client, [spec], "me", VirtualClock(T0 + 1))
        assert scheduler.run_once() == [] and added == []
        client.pause("cron_paused", "none")
        scheduler.run_once()
        assert added == [T0 + 60]


def test_real_time_two_workers_one_message_per_minute(
    client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Both workers claim the next tick at once (it is < 60 s away), and when it comes, the
    # tick after it; the test ends once that second tick exists: at most ~62 s.
    script = write_script(tmp_path / "tick.sh", '#!/bin/bash\necho "done tick" >&$RQ_WRITE\n')
    queue_dir = make_queue(
        tmp_path, "cron_rt", script, schedule=[{"cron": "* * * * *", "param1": "p"}]
    )
    if time.time() % 60 > 55:  # workers need a moment to start: not right before a tick
        time.sleep(62 - time.time() % 60)
    start = time.time()
    start_worker(str(queue_dir))
    start_worker(str(queue_dir))
    first = (int(start) // 60 + 1) * 60

    wait_for(lambda: first + 60 in _all_ticks(client, queue_dir), timeout=68, what="two ticks")
    ticks = _all_ticks(client, queue_dir)
    assert ticks == [first, first + 60], ticks


def _done_ticks(queue_dir: Path) -> list[int]:
    ticks = []
    for path in queue_dir.glob("*/*/msg.json"):
        tick = json.loads(path.read_text())["envelope"].get("tick")
        if tick is not None:
            ticks.append(int(tick))
    return ticks


def _all_ticks(client: Client, queue_dir: Path) -> list[int]:
    """Each message once: those still on the node plus those run (and acked) on disk."""
    on_node = set(client.scan_jobs("cron_rt"))
    ticks = _done_ticks(queue_dir)
    for job_id in on_node:
        if not list(queue_dir.glob(f"*/{job_id.replace('/', '_')}")):
            shown = client.show(job_id)
            if shown is not None:
                tick = Envelope.from_json(shown["body"]).tick
                ticks.append(tick if tick is not None else -1)
    return sorted(ticks)


def test_periodic_task_enqueued_once_by_two_processes(node: NodeProcess) -> None:
    from conveyor.worker import App
    from conveyor.worker.service import start_periodic

    address = f"127.0.0.1:{node.port}"
    app = App(nodes=address, default_queue="periodic_q")

    @app.periodic("* * * * *")
    def every_minute() -> None:
        pass

    if time.time() % 60 > 54:  # a tick passing mid-test would rightly add a second job
        time.sleep(61 - time.time() % 60)
    stop = threading.Event()
    clients = [Client([address]), Client([address])]
    try:
        for client in clients:  # two worker processes carrying the same app
            start_periodic(app, client, stop)
        # `* * * * *`: the next tick is always within the minute of look-ahead.
        wait_for(lambda: list(clients[0].scan_jobs("periodic_q")), what="the tick's job")
        time.sleep(2.5)  # both schedulers have looked at least twice more by now
        jobs = list(clients[0].scan_jobs("periodic_q"))
        assert len(jobs) == 1
        body = json.loads(clients[0].show(jobs[0])["body"])  # type: ignore[index]
        assert body["task"].endswith("every_minute") and body["args"] == []
    finally:
        stop.set()
        for client in clients:
            client.close()
