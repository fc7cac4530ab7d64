"""coalesce_params and blocking_params, with two worker processes on the same queue."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from conveyor.client import Client
from conveyor.worker.envelope import Envelope
from conveyor.worker.queuedir import QueueConfig
from conveyor.worker.service import add_message
from tests.worker.conftest import WorkerProcess, make_queue, wait_state, write_script

# Logs "start P" / "end P" around a short sleep, one line per write (O_APPEND: atomic).
SCRIPT = (
    "#!/bin/bash\n"
    'echo "start $RQ_PARAM1 $RQ_MSG_ID" >> "$EVENTS"\n'
    "sleep 0.4\n"
    'echo "end $RQ_PARAM1 $RQ_MSG_ID" >> "$EVENTS"\n'
    'echo "done ran" >&$RQ_WRITE\n'
)


def _setup(tmp_path: Path, name: str, **options: object) -> tuple[Path, Path]:
    events = tmp_path / "events"
    script = write_script(tmp_path / "script.sh", SCRIPT)
    env_vars = {"EVENTS": str(events)}
    queue_dir = make_queue(tmp_path, name, script, env_vars=env_vars, retry=5, **options)
    return queue_dir, events


def test_blocking_params_one_at_a_time_across_workers(
    client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    queue_dir, events = _setup(tmp_path, "blocking", blocking_params=[1], num_workers=3)
    config = QueueConfig.load(queue_dir)
    params = ["A", "A", "A", "A", "B", "B"]
    ids = [add_message(client, config, Envelope(params={"param1": p})) for p in params]
    start_worker(str(queue_dir))
    start_worker(str(queue_dir))
    for job_id in ids:
        assert wait_state(queue_dir, job_id, ("done", "err"), timeout=40)["state"] == "done"
    lines = events.read_text().split("\n")
    for param in ("A", "B"):
        mine = [line.split()[0] for line in lines if line and line.split()[1] == param]
        # Never two runs of the same param at once: starts and ends strictly alternate.
        assert mine == ["start", "end"] * params.count(param), mine


def test_coalesce_params_merge_waiting_messages(
    client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    queue_dir, events = _setup(tmp_path, "coalesce", coalesce_params=[1], num_workers=2)
    config = QueueConfig.load(queue_dir)
    client.pause("coalesce", "out")  # let all messages gather before anyone takes one
    params = ["X"] * 6 + ["Y"]
    ids = [add_message(client, config, Envelope(params={"param1": p})) for p in params]
    start_worker(str(queue_dir))
    start_worker(str(queue_dir))
    client.pause("coalesce", "none")
    statuses = [wait_state(queue_dir, i, ("done", "err"), timeout=40) for i in ids]
    assert all(s["state"] == "done" for s in statuses), statuses
    runs_x = [line for line in events.read_text().split("\n") if line.startswith("start X")]
    coalesced = [s for s in statuses if s["status"].startswith("coalesced into ")]
    # Six X messages: each either ran or rode on a run. Up to four were fetched at once by
    # the four slots (only one got the lock; the others went back), so up to four runs;
    # the rest were waiting in the queue when the first run started and rode on it.
    assert 1 <= len(runs_x) <= 4 and coalesced, (runs_x, statuses)
    assert len(runs_x) + len(coalesced) == 6
    assert client.qlen("coalesce") == 0
