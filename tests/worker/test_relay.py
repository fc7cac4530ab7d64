"""Relay to another cluster (conveyor://host:port/queue): idempotent, attachments intact."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conveyor.client import Client
from conveyor.worker.envelope import Attachment, Envelope
from conveyor.worker.queuedir import QueueConfig
from conveyor.worker.relay import RelayError, relay_message
from conveyor.worker.runner import QueueRunner
from conveyor.worker.service import add_message
from tests.servers import NodeProcess, running_node
from tests.worker.conftest import WorkerProcess, make_queue, wait_for, wait_state, write_script

RECEIVER = (
    "#!/bin/bash\n"
    'md5sum "$RQ_MSG_DIR"/../attach/* > "$RQ_MSG_DIR"/../md5s 2>/dev/null\n'
    'echo "ran $RQ_MSG_ID" >> "$RUNS"\n'
    'echo "done received $RQ_PARAM1" >&$RQ_WRITE\n'
)


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with running_node(tmp_path_factory.mktemp("remote")) as started:
        yield started


@pytest.fixture
def remote_client(remote: NodeProcess) -> Iterator[Client]:
    with Client([f"127.0.0.1:{remote.port}"]) as c:
        yield c


def test_retried_relay_adds_one_message(remote: NodeProcess, remote_client: Client) -> None:
    url = f"conveyor://127.0.0.1:{remote.port}/inbox_once"
    first = relay_message(url, Envelope(params={"param1": "a"}), "key-1")
    again = relay_message(url, Envelope(params={"param1": "a"}), "key-1")
    assert again == first
    assert remote_client.qlen("inbox_once") == 1
    other = relay_message(url, Envelope(params={"param1": "a"}), "key-2")
    assert other != first and remote_client.qlen("inbox_once") == 2


def test_bad_destinations_fail_cleanly(remote: NodeProcess) -> None:
    with pytest.raises(RelayError, match="expected conveyor://host:port/queue"):
        relay_message("conveyor://127.0.0.1:1/", Envelope(), "k")
    with pytest.raises(RelayError, match=r"relay to conveyor://127\.0\.0\.1:1/q failed"):
        relay_message("conveyor://127.0.0.1:1/q", Envelope(), "k")


def test_dup_relays_with_attachment_and_receiver_drops_a_duplicate(
    client: Client, remote: NodeProcess, remote_client: Client, tmp_path: Path,
    start_worker: Callable[..., WorkerProcess],
) -> None:  # fmt: skip
    runs = tmp_path / "runs"
    url = f"conveyor://127.0.0.1:{remote.port}/inbox"
    sender_script = write_script(
        tmp_path / "send.sh",
        f'#!/bin/bash\necho "dup 0-X-{url}" >&$RQ_WRITE\nread -u $RQ_READ\n'
        'echo "done $REPLY" >&$RQ_WRITE\n',
    )
    sender = make_queue(tmp_path / "local", "outbox", sender_script)
    receiver = make_queue(
        tmp_path / "remote", "inbox", write_script(tmp_path / "recv.sh", RECEIVER),
        env_vars={"RUNS": str(runs)},
    )  # fmt: skip
    payload = tmp_path / "data.bin"
    payload.write_bytes(bytes(range(256)) * 1000)
    attachment = Attachment.from_file(payload)
    job_id = add_message(client, QueueConfig.load(sender), Envelope({"param1": "hi"}, [attachment]))
    start_worker(str(sender))
    status = wait_state(sender, job_id, ("done", "err"))
    assert status["state"] == "done" and status["status"].startswith("ok D-"), status
    relayed_id = status["status"].split()[1]

    # A sender that died after ADDJOB but before its commit record: its retry adds a
    # second job with the same key; the receiving worker must run only one of them.
    twin = Envelope.from_json(remote_client.show(relayed_id)["body"])  # type: ignore[index]
    twin_id = remote_client.add_job("inbox", twin.to_json())
    worker = WorkerProcess(remote, [str(receiver)], tmp_path / "remote_worker.log")
    try:
        first = wait_state(receiver, relayed_id, ("done", "err"))
        second = wait_state(receiver, twin_id, ("done", "err"))
    finally:
        worker.stop()
    assert first["status"] == "received hi"
    assert second["state"] == "done" and second["status"].startswith("duplicate relay of")
    assert len(runs.read_text().split("\n")) - 1 == 1
    md5s = (receiver / "done" / relayed_id.replace("/", "_") / "md5s").read_text()
    assert md5s.split()[0] == hashlib.md5(payload.read_bytes()).hexdigest()


def test_corrupted_attachment_goes_to_err(
    remote: NodeProcess, remote_client: Client, tmp_path: Path
) -> None:
    receiver = make_queue(tmp_path, "inbox_bad", write_script(tmp_path / "r.sh", RECEIVER))
    bad = Attachment("x.bin", b"payload", hashlib.md5(b"other").hexdigest())
    job_id = remote_client.add_job("inbox_bad", Envelope(attachments=[bad]).to_json(), retry=5)
    worker = WorkerProcess(remote, [str(receiver)], tmp_path / "w.log")
    try:
        status = wait_state(receiver, job_id, ("done", "err"))
    finally:
        worker.stop()
    assert status["state"] == "err" and "failed its MD5 check" in status["status"]
    wait_for(lambda: remote_client.qlen("inbox_bad") == 0)


def test_a_redelivered_relayed_job_still_runs(client: Client, tmp_path: Path) -> None:
    queue_dir = make_queue(tmp_path, "idem_q", "/bin/true")
    runner = QueueRunner(QueueConfig.load(queue_dir), client, threading.Event())
    envelope = Envelope(idempotency_key="key-redelivered")
    assert runner.first_delivery(envelope, "D-job-one")
    assert runner.first_delivery(envelope, "D-job-one")  # the same job again: a resend
    assert not runner.first_delivery(envelope, "D-job-two")  # a second job with the key
