"""Every way a queue script can go wrong ends in a visible state, never a lost message."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

from conveyor.client import Client
from conveyor.worker.envelope import Envelope
from conveyor.worker.queuedir import QueueConfig
from conveyor.worker.service import add_message
from tests.worker.conftest import WorkerProcess, make_queue, wait_for, wait_state, write_script

SCRIPTS = {
    "exit_after_done": 'echo "done all good" >&$RQ_WRITE\nexit 1\n',
    "no_status": "echo 'forgot to report'\n",
    "signal": 'echo "run about to die" >&$RQ_WRITE\nkill -9 $$\n',
    "hang": 'echo "run hanging" >&$RQ_WRITE\nsleep 60\necho "done never" >&$RQ_WRITE\n',
    "flood": "head -c 10000000 /dev/zero | tr '\\0' 'x' >&$RQ_WRITE\necho \"done\" >&$RQ_WRITE\n",
    "flood_lines": 'yes "run flooding" | head -c 10000000 >&$RQ_WRITE\necho "done" >&$RQ_WRITE\n',
    "resend": (
        'date +%s.%N >> "$RQ_MSG_DIR/../runs"\n'
        'if [ "$RQ_COUNT" == "0" ]; then echo "resend 2-not yet" >&$RQ_WRITE; exit 0; fi\n'
        'echo "done count $RQ_COUNT" >&$RQ_WRITE\n'
    ),
    "dup_missing": (
        'echo "dup 0-X-no_such_queue" >&$RQ_WRITE\nread -u $RQ_READ\n'
        'echo "err reply: $REPLY" >&$RQ_WRITE\n'
    ),
    "dup_bad_port": (
        'echo "dup 0-X-conveyor://127.0.0.1:notaport/q" >&$RQ_WRITE\nread -u $RQ_READ\n'
        'echo "err reply: $REPLY" >&$RQ_WRITE\n'
    ),
}


def _add(client: Client, queue_dir: Path) -> str:
    return add_message(client, QueueConfig.load(queue_dir), Envelope())


def test_failure_paths(
    client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    queues = {}
    for name, body in SCRIPTS.items():
        script = write_script(tmp_path / f"{name}.sh", "#!/bin/bash\n" + body)
        # Only "hang" may time out: a busy machine takes a second to start `bash -lc`, and
        # ten scripts starting at once under a 2 s timeout sometimes ended in "timed out".
        timeout = 2 if name == "hang" else 30
        queues[name] = make_queue(tmp_path / "queues", name, script, timeout=timeout, retry=5)
    ids = {name: _add(client, queue_dir) for name, queue_dir in queues.items()}
    start_worker(*map(str, queues.values()))

    def final(name: str) -> dict[str, object]:
        return wait_state(queues[name], ids[name], ("done", "err"), timeout=30)

    assert final("exit_after_done") == {
        **final("exit_after_done"),
        "state": "err",
        "status": "process exited improperly (exit status 1) after done",
        "exit": 1,
    }
    assert final("no_status")["status"] == "the script exited without reporting a status"
    assert (
        final("signal")["status"]
        == "process exited improperly (killed by signal SIGKILL) after nothing"
    )
    assert final("hang")["status"] == "timed out after 2s; the script was killed"
    assert final("flood")["status"] == "status line longer than 65536 bytes"
    assert final("flood_lines")["status"] == "status pipe flooded: more than 1048576 bytes"
    assert final("dup_missing")["status"] == "reply: fail no such queue: no_such_queue"
    assert final("dup_bad_port")["status"] == (
        "reply: fail bad destination 'conveyor://127.0.0.1:notaport/q': "
        "bad port in node address '127.0.0.1:notaport'"
    )

    resent = final("resend")
    assert resent["state"] == "done" and resent["status"] == "count 1"
    runs = (
        (queues["resend"] / "done" / ids["resend"].replace("/", "_") / "runs").read_text().split()
    )
    assert len(runs) == 2 and float(runs[1]) - float(runs[0]) >= 2.0  # NACK DELAY 2 held it

    # Nothing was lost: every message is settled on the node (acked), none still queued.
    for name, queue_dir in queues.items():
        assert client.qlen(QueueConfig.load(queue_dir).name) == 0, name
    # The killed script's output is kept for the operator.
    stdio = next((queues["no_status"] / "err").glob("*/stdio.log")).read_text()
    assert "forgot to report" in stdio


def test_worker_killed_mid_run_message_runs_again(
    client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    # First run: marks itself and sleeps; the worker is SIGKILLed. The job's RETRY (2 s)
    # brings it back; the next worker kills the orphaned run and runs the message again.
    script = write_script(
        tmp_path / "once.sh",
        "#!/bin/bash\n"
        'echo "run started" >&$RQ_WRITE\n'
        'echo "pid $$" >> ../runs\n'
        "if [ ! -e first_done ]; then touch first_done; sleep 60; fi\n"
        'echo "done second run" >&$RQ_WRITE\n',
    )
    queue_dir = make_queue(tmp_path, "once", script, retry=2)
    job_id = _add(client, queue_dir)
    first = start_worker(str(queue_dir))
    wait_for(lambda: (queue_dir / "run" / job_id.replace("/", "_") / "runs").exists())
    first.signal(signal.SIGKILL)
    first.wait(10)
    start_worker(str(queue_dir))
    status = wait_state(queue_dir, job_id, ("done", "err"), timeout=30)
    assert status["state"] == "done" and status["status"] == "second run"
    runs = (queue_dir / "done" / job_id.replace("/", "_") / "runs").read_text().split("\n")
    assert len([r for r in runs if r]) == 2
    assert client.qlen("once") == 0
    msg = json.loads((queue_dir / "done" / job_id.replace("/", "_") / "msg.json").read_text())
    assert msg["id"] == job_id


def test_a_run_past_the_grace_period_is_ended_and_put_back(
    client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    script = write_script(
        tmp_path / "long.sh",
        '#!/bin/bash\necho "run working" >&$RQ_WRITE\necho $$ > ../../../pid\nsleep 60\n',
    )
    queue_dir = make_queue(tmp_path, "long", script, retry=600)
    job_id = _add(client, queue_dir)
    worker = start_worker(str(queue_dir), "--grace", "0.2")
    pid = int(wait_for(lambda: _read(queue_dir / "pid"), what="the script started"))
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    # Not left running unwatched, its job held by the node until RETRY (10 minutes):
    # ended, and its job back in the queue for the next worker, no retry spent.
    assert not Path(f"/proc/{pid}").exists() or _zombie(pid)
    assert client.qlen("long") == 1
    status = wait_state(queue_dir, job_id, ("que",), timeout=1)
    assert status["status"] == "put back: the worker stopped before the script ended"


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
