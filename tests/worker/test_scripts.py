"""Queue scripts end to end: the seed's bash example and a Python one, run unchanged by a
real `conveyor worker` process against a real node."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor.client import Client
from conveyor.worker.envelope import Envelope
from conveyor.worker.queuedir import QueueConfig
from conveyor.worker.service import add_message
from tests.servers import NodeProcess
from tests.worker.conftest import EXAMPLES, WorkerProcess, make_queue, wait_for, wait_state

RQ_VARS = [
    "RQ_SCRIPT", "RQ_REALSCRIPT", "RQ_HOST", "RQ_DEST", "RQ_DEST_QUEUE", "RQ_MSG_ID",
    "RQ_FULL_MSG_ID", "RQ_MSG_DIR", "RQ_READ", "RQ_WRITE", "RQ_COUNT", "RQ_PARAM1",
    "RQ_PARAM2", "RQ_PARAM3", "RQ_PARAM4", "RQ_FORCE_REMOTE", "RQ_PORT", "RQ_ENV", "RQ_VER",
]  # fmt: skip


def add(client: Client, queue_dir: Path, **params: str) -> str:
    return add_message(client, QueueConfig.load(queue_dir), Envelope(params=params))


def printed_env(log: str) -> dict[str, str]:
    return dict(re.findall(r"^(RQ_[A-Z0-9_]+)=(.*)$", log, re.MULTILINE))


def find_clone(queue_dir: Path, origin_id: str) -> str | None:
    for path in queue_dir.glob("done/*/msg.json"):
        doc = json.loads(path.read_text())
        if doc.get("envelope", {}).get("origin", "").endswith("/" + origin_id):
            return str(doc["id"])
    return None


def check_env(env: dict[str, str], queue_dir: Path, job_id: str, node: NodeProcess) -> None:
    config = QueueConfig.load(queue_dir)
    address = f"127.0.0.1:{node.port}"
    msg_dir = queue_dir.resolve() / "run" / job_id.replace("/", "_") / "job"
    expected = {
        "RQ_SCRIPT": config.script,
        "RQ_REALSCRIPT": os.path.realpath(config.script),
        "RQ_HOST": f"conveyor://{address}/",
        "RQ_DEST": f"conveyor://{address}/{config.name}",
        "RQ_DEST_QUEUE": config.name,
        "RQ_MSG_ID": job_id,
        "RQ_FULL_MSG_ID": f"conveyor://{address}/{config.name}/{job_id}",
        "RQ_MSG_DIR": str(msg_dir),
        "RQ_COUNT": "0",
        "RQ_PARAM1": "plain",
        "RQ_PARAM2": "two words",
        "RQ_PARAM3": "",
        "RQ_PARAM4": "",
        "RQ_FORCE_REMOTE": "",
        "RQ_PORT": str(node.port),
        "RQ_ENV": "test",
        "RQ_VER": "0.1.0",
    }
    assert set(RQ_VARS) <= set(env), sorted(set(RQ_VARS) - set(env))
    assert {k: env[k] for k in expected} == expected
    assert env["RQ_READ"].isdigit() and env["RQ_WRITE"].isdigit()
    assert env["RQ_READ"] != env["RQ_WRITE"]


@pytest.mark.parametrize("script", ["test_script.sh", "python_script.py"])
def test_seed_example_runs_unchanged(
    node: NodeProcess, client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess],
    script: str,
) -> None:  # fmt: skip
    # A symlinked script: RQ_REALSCRIPT is the resolved path, RQ_SCRIPT the configured one.
    link = tmp_path / "current_script"
    link.symlink_to(EXAMPLES / "worker_rq" / script)
    test = make_queue(tmp_path, "test", link, num_workers=4, retry=2, env="test")
    nop = make_queue(tmp_path, "test_nop", EXAMPLES / "worker_rq" / "nop.sh")
    ids = {
        p: add(client, test, param1=p, **({"param2": "two words"} if p == "plain" else {}))
        for p in ("plain", "err", "duplicate", *(["slow"] if script.endswith(".sh") else []))
    }
    start_worker(str(test), str(nop))

    done = wait_state(test, ids["plain"], ("done",))
    assert done["status"] == "script completed happily"
    log = (test / "done" / ids["plain"].replace("/", "_") / "stdio.log").read_text()
    check_env(printed_env(log), test, ids["plain"], node)

    assert wait_state(test, ids["err"], ("err",))["status"] == "by design"

    # The clone reaches test_nop and runs there; its origin names the duplicated message.
    dup_status = wait_state(test, ids["duplicate"], ("done", "err"))
    dup_log = next(test.glob(f"*/{ids['duplicate'].replace('/', '_')}/stdio.log")).read_text()
    clone_id = wait_for(lambda: find_clone(nop, ids["duplicate"]), what="the clone in test_nop")
    assert wait_state(nop, clone_id, ("done",))["status"] == "nop"
    if script == "python_script.py":
        assert dup_status["state"] == "done"
    else:
        # The seed's bash compares the whole reply line to "ok", but the grammar's reply is
        # "ok <new id>": under RQ too this branch ends in err after creating the clone.
        assert dup_status == {**dup_status, "state": "err", "status": "duplication failed"}
        assert f"Sorry, system didn't dup test message properly : ok {clone_id}" in dup_log

    if "slow" not in ids:
        return
    # With "dup_reply_id": false the reply is a bare "ok": the example's dup branch ends done.
    bare = make_queue(tmp_path, "test_bare", link, dup_reply_id=False, env="test")
    bare_id = add(client, bare, param1="duplicate")
    start_worker(str(bare))  # the first worker still serves test_nop
    bare_status = wait_state(bare, bare_id, ("done", "err"))
    assert bare_status["state"] == "done", bare_status
    assert bare_status["status"] == "script completed happily"
    # slow: 30 s in run, kept from re-delivery (RETRY 2) by heartbeats, then done once.
    slow = wait_state(test, ids["slow"], ("done",), timeout=60)
    assert slow["status"] == "script completed happily"
    slow_log = (test / "done" / ids["slow"].replace("/", "_") / "stdio.log").read_text()
    assert slow_log.count("RQ_MSG_ID=") == 1
