"""Job bodies no script can run: each ends in err at once with a status that says why,
never a worker that dies or a message delivered again and again."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor.client import Client
from conveyor.worker.envelope import Envelope, EnvelopeError
from conveyor.worker.script import ScriptHooks, run_script
from tests.servers import NodeProcess
from tests.worker.conftest import WorkerProcess, make_queue, wait_for, wait_state, write_script

QUEUE = "envelopes"
# A producer that does not go through the console can send any of these.
BAD = {
    "nul_param": (
        b'{"params": {"param1": "a\\u0000b"}}',
        "not a message envelope: a param holds a NUL byte",
    ),
    "count_1e999": (
        b'{"params": {}, "count": 1e999}',
        "not a message envelope: bad envelope field: cannot convert float infinity to integer",
    ),
    "nested_too_deeply": (b"[" * 100_000, "not a message envelope: job body is JSON nested"),
}


@pytest.fixture(scope="module")
def queue_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("envelopes")
    script = write_script(parent / "ok.sh", '#!/bin/bash\necho "done ran" >&$RQ_WRITE\n')
    return make_queue(parent, QUEUE, script, retry=2)


@pytest.fixture(scope="module")
def worker(node: NodeProcess, queue_dir: Path) -> Iterator[WorkerProcess]:
    started = WorkerProcess(node, [str(queue_dir)], queue_dir.parent / "worker.log")
    yield started
    started.stop()


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_body_no_script_can_run_goes_to_err(
    case: str, client: Client, worker: WorkerProcess, queue_dir: Path
) -> None:
    body, status = BAD[case]
    job_id = client.add_job(QUEUE, body, retry=2)
    # Within RETRY twice over: a message that fails some other way comes back, forever.
    found = wait_state(queue_dir, job_id, ("err",), timeout=10)
    assert found["status"].startswith(status), found
    wait_for(lambda: client.show(job_id) is None, 10, "the job acked")
    assert worker.process.poll() is None, worker.output()
    # The worker goes on running good messages.
    good = client.add_job(QUEUE, b'{"params": {"param1": "fine"}}', retry=2)
    assert wait_state(queue_dir, good, ("done",), timeout=10)["status"] == "ran"


@pytest.mark.parametrize(
    "body",
    [
        b'{"count": 1e999}',
        b'{"max_count": -1e999}',
        b'{"tick": 1e999}',
        b'{"due_at": 1e999}',
        b'{"due_at": NaN}',
        b'{"attachments": [{"name": "a", "md5": "0", "url": "http://h/a", "size": 1e999}]}',
        b'{"params": ' + b"[" * 100_000,
    ],
    ids=["count", "max_count", "tick", "due_at", "due_at_nan", "size", "nesting"],
)
def test_numbers_no_field_can_hold_and_deep_nesting_are_bad_envelopes(body: bytes) -> None:
    with pytest.raises(EnvelopeError):
        Envelope.from_json(body)


def test_a_script_that_cannot_start_closes_its_pipes(tmp_path: Path) -> None:
    # Popen refuses a NUL byte in the environment with ValueError, not OSError.
    hooks = ScriptHooks(lambda text: None, lambda text: "fail", lambda: None, 1.0)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        result = run_script(
            ["/bin/true"], tmp_path, tmp_path / "stdio.log", {"X": "a\0b"}, 5.0, hooks
        )
        assert result.state == "err"
        assert result.text == "could not start the script: embedded null byte"
    assert len(os.listdir("/proc/self/fd")) == before
