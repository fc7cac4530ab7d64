"""Webhooks and referenced attachments, against real HTTP servers the tests start on
127.0.0.1, a real node and real `conveyor worker` processes."""

from __future__ import annotations

import hashlib
import json
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conveyor.client import Client
from conveyor.web import workdirs
from conveyor.worker import webhooks
from conveyor.worker.attachments import FetchError, fetch
from conveyor.worker.envelope import Attachment, Envelope, EnvelopeError
from conveyor.worker.queuedir import MessageStore, QueueConfig
from conveyor.worker.service import add_message
from conveyor.worker.webhooks import WebhookSender, check_url
from tests.worker.conftest import WorkerProcess, make_queue, wait_for, wait_state, write_script


class Recorder:
    """An HTTP server: POSTs are recorded and answered with the next status of `statuses`
    (the last one repeats), after `on_post` (if set) is called with the POST's number;
    GET /file serves `payload`."""

    def __init__(self, statuses: list[int], payload: bytes = b"") -> None:
        self.statuses, self.payload = list(statuses), payload
        self.posts: list[dict[str, Any]] = []
        self.on_post: Callable[[int], None] | None = None
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                recorder.posts.append(json.loads(self.rfile.read(length)))
                if recorder.on_post is not None:
                    recorder.on_post(len(recorder.posts))
                statuses = recorder.statuses
                status = statuses.pop(0) if len(statuses) > 1 else statuses[0]
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                if self.path != "/file":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("content-length", str(len(recorder.payload)))
                self.end_headers()
                self.wfile.write(recorder.payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder_factory() -> Iterator[Callable[..., Recorder]]:
    started: list[Recorder] = []

    def make(statuses: list[int], payload: bytes = b"") -> Recorder:
        started.append(Recorder(statuses, payload))
        return started[-1]

    yield make
    for recorder in started:
        recorder.close()


DONE = '#!/bin/bash\necho "done finished $RQ_PARAM1" >&$RQ_WRITE\n'


def _queue(tmp_path: Path, name: str) -> QueueConfig:
    script = write_script(tmp_path / f"{name}.sh", DONE)
    return QueueConfig.load(make_queue(tmp_path, name, script, exec_prefix=""))


def webhook_record(path: Path) -> dict[str, Any] | None:
    """The message's webhook record, or None until the worker has written it (the
    message reaches `done` before its first webhook attempt is recorded)."""
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def test_webhook_retried_until_delivered(
    client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess],
    recorder_factory: Callable[..., Recorder],
) -> None:  # fmt: skip
    hook = recorder_factory([500, 503, 200])
    config = _queue(tmp_path, "wh_ok")
    start_worker(str(config.directory), "--webhook-backoff", "0.05")
    job_id = add_message(client, config, Envelope({"param1": "x"}, webhook=f"{hook.url}/hook"))
    done = wait_state(config.directory, job_id, ("done",))
    record_path = config.directory / "done" / job_id.replace("/", "_") / "webhook.json"
    record = wait_for(
        lambda: (doc := webhook_record(record_path)) and doc["delivered"] and doc,
        what="the webhook delivered",
    )
    assert record["attempts"] == 3 and record["errors"] == ["HTTP 500", "HTTP 503"]
    assert len(hook.posts) == 3
    final = hook.posts[-1]
    assert final["id"] == job_id and final["queue"] == "wh_ok" and final["state"] == "done"
    assert final["status"] == done["status"] == "finished x" and final["exit"] == 0


def test_webhook_attempts_are_bounded(
    client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess],
    recorder_factory: Callable[..., Recorder],
) -> None:  # fmt: skip
    hook = recorder_factory([500])
    config = _queue(tmp_path, "wh_fail")
    start_worker(str(config.directory), "--webhook-backoff", "0.05", "--webhook-attempts", "3")
    job_id = add_message(client, config, Envelope(webhook=f"{hook.url}/hook"))
    wait_state(config.directory, job_id, ("done",))
    record_path = config.directory / "done" / job_id.replace("/", "_") / "webhook.json"
    record = wait_for(
        lambda: (doc := webhook_record(record_path)) and doc["gave_up"] and doc,
        what="the webhook given up",
    )
    assert record["attempts"] == 3 and not record["delivered"]
    assert len(hook.posts) == 3


def test_a_fast_delivery_is_not_recorded_as_pending_after_it(
    tmp_path: Path, recorder_factory: Callable[..., Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submitting thread's first record ("not delivered yet") must never land after
    the sender's "delivered": here it is slowed well past a local POST, so any order in
    which the sender can take the delivery before that record is written shows up."""
    hook = recorder_factory([200])
    record_now = webhooks._record

    def slow_first_record(delivery: webhooks.Delivery, **state: bool) -> None:
        if delivery.attempts == 0:
            time.sleep(0.3)
        record_now(delivery, **state)

    monkeypatch.setattr(webhooks, "_record", slow_first_record)
    store = MessageStore(tmp_path)
    record_path = store.move(store.enter_run("J1", {"id": "J1"}), "done", "ok") / "webhook.json"
    sender = WebhookSender(attempts=3, backoff=0.05)
    try:
        assert sender.submit(f"{hook.url}/hook", {"id": "x"}, store, "J1")
        record = wait_for(
            lambda: (doc := webhook_record(record_path)) and doc["delivered"] and doc,
            what="the webhook recorded as delivered",
        )
    finally:
        sender.close(2.0)
    assert record["attempts"] == 1 and hook.posts == [{"id": "x"}]
    assert webhook_record(record_path) == record  # and it stays so


def test_a_message_moved_between_attempts_keeps_its_webhook_record(
    client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess],
    recorder_factory: Callable[..., Recorder],
) -> None:  # fmt: skip
    """An operator moves the failed message (err -> done, from the console) while its first
    attempt is under way: the later records follow it to done/, where the console reads."""
    hook = recorder_factory([500, 200])
    script = write_script(tmp_path / "fails.sh", '#!/bin/bash\necho "err boom" >&$RQ_WRITE\n')
    config = QueueConfig.load(make_queue(tmp_path, "wh_moved", script, exec_prefix=""))
    start_worker(str(config.directory), "--webhook-backoff", "0.05")
    job_id = add_message(client, config, Envelope(webhook=f"{hook.url}/hook"))

    def operator_moves_it(post_number: int) -> None:
        if post_number == 1:
            workdirs.move(config, job_id, "done", "fixed by hand")

    hook.on_post = operator_moves_it
    wait_for(lambda: len(hook.posts) == 2, what="the second attempt")
    record = wait_for(
        lambda: (doc := workdirs.message(config, job_id)["webhook"]) and doc["delivered"] and doc,
        5,
        "the console to show the webhook delivered",
    )
    assert record["attempts"] == 2 and record["errors"] == ["HTTP 500"]
    assert hook.posts[0]["state"] == "err"


class Silent:
    """A TCP endpoint that accepts connections and never answers: a hung webhook target."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)  # the accept loop looks at `closed` between waits
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}/hook"
        self.connections: list[socket.socket] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                self.connections.append(self.server.accept()[0])  # held open, never read
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> None:
        self.closed = True
        self.server.close()
        for connection in self.connections:
            connection.close()


def test_a_stop_is_not_held_up_by_a_webhook_that_never_answers(
    client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    """The endpoint takes the connection and never answers: the first attempt waits for
    its answer, the second message's waits its turn. TERM with a long grace: the worker
    exits without waiting for them (it waited up to the whole grace), and each message's
    webhook.json says it was dropped."""
    silent = Silent()
    try:
        config = _queue(tmp_path, "wh_hang")
        worker = start_worker(str(config.directory), "--grace", "300")
        ids = [add_message(client, config, Envelope(webhook=silent.url)) for _ in range(2)]
        for job_id in ids:
            wait_state(config.directory, job_id, ("done",))
        wait_for(lambda: silent.connections, what="the first attempt connected")
        worker.signal(signal.SIGTERM)
        assert worker.wait(60) == 0  # bounded: before the fix it waited out the 300 s grace
    finally:
        silent.close()
    assert "webhooks: 2 deliveries dropped at stop, not sent within 2s" in worker.output()
    for job_id in ids:
        record = webhook_record(
            config.directory / "done" / job_id.replace("/", "_") / "webhook.json"
        )
        assert record is not None and (record["delivered"], record["gave_up"]) == (False, True)
        assert record["errors"][-1] == webhooks.DROPPED


@pytest.mark.parametrize("url", ["file:///etc/hostname", "ftp://127.0.0.1/x"])
def test_a_url_from_a_raw_body_that_is_no_http_url_is_given_up(tmp_path: Path, url: str) -> None:
    """A body added with a plain ADDJOB skips the CLI's and the console's check: urllib
    would read file:///etc/hostname and record it delivered (no POST made)."""
    store = MessageStore(tmp_path)
    record_path = store.move(store.enter_run("J1", {"id": "J1"}), "done", "ok") / "webhook.json"
    sender = WebhookSender(attempts=3, backoff=0.05)
    try:
        assert not sender.submit(url, {"id": "x"}, store, "J1")
    finally:
        sender.close(1.0)
    record = webhook_record(record_path)
    assert record is not None
    assert (record["delivered"], record["gave_up"], record["attempts"]) == (False, True, 0)
    assert record["errors"] == ["webhook must be an http(s) URL of at most 2048 characters"]


def test_webhook_urls_are_checked() -> None:
    assert check_url("http://127.0.0.1:8080/x?y=1") == "http://127.0.0.1:8080/x?y=1"
    for bad in ("ftp://h/x", "http://", "/relative", "http://h/a b", "http://h/" + "x" * 3000,
                "http://h:x/a", "http://h:99999/a"):  # fmt: skip
        with pytest.raises(ValueError, match="webhook"):
            check_url(bad)


def test_fetch_checks_md5_size_and_failures(
    tmp_path: Path, recorder_factory: Callable[..., Recorder]
) -> None:
    payload = b"attachment bytes" * 1000
    server = recorder_factory([200], payload)
    md5 = hashlib.md5(payload).hexdigest()
    target = tmp_path / "a.bin"
    fetch(Attachment("a.bin", b"", md5, f"{server.url}/file", len(payload)), target)
    assert target.read_bytes() == payload
    with pytest.raises(EnvelopeError, match="MD5"):
        fetch(Attachment("b.bin", b"", "0" * 32, f"{server.url}/file"), tmp_path / "b.bin")
    with pytest.raises(EnvelopeError, match="more than its 10 bytes"):
        fetch(Attachment("c.bin", b"", md5, f"{server.url}/file", 10), tmp_path / "c.bin")
    with pytest.raises(EnvelopeError, match="404"):
        fetch(Attachment("d.bin", b"", md5, f"{server.url}/gone"), tmp_path / "d.bin")
    with pytest.raises(FetchError):  # nobody listens there: worth trying again later
        fetch(Attachment("e.bin", b"", md5, "http://127.0.0.1:9/file"), tmp_path / "e.bin")
    with pytest.raises(EnvelopeError, match="http"):
        fetch(Attachment("f.bin", b"", md5, "file:///etc/passwd"), tmp_path / "f.bin")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]  # no .part left behind


def test_worker_fetches_referenced_attachment_and_dup_keeps_the_reference(
    client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess],
    recorder_factory: Callable[..., Recorder],
) -> None:  # fmt: skip
    payload = b"\x00\x01 referenced " * 5000
    server = recorder_factory([200], payload)
    md5 = hashlib.md5(payload).hexdigest()
    dup = (
        "#!/bin/bash\necho 'dup 0-X-ref_dst' >&$RQ_WRITE\n"
        'read -u $RQ_READ r\necho "done $r" >&$RQ_WRITE\n'
    )
    src = QueueConfig.load(
        make_queue(tmp_path, "ref_src", write_script(tmp_path / "dup.sh", dup), exec_prefix="")
    )
    dst = _queue(tmp_path, "ref_dst")
    start_worker(str(src.directory), str(dst.directory))
    ref = Attachment("in.bin", b"", md5, f"{server.url}/file", len(payload))
    job_id = add_message(client, src, Envelope(attachments=[ref]))
    status = wait_state(src.directory, job_id, ("done",))
    clone_id = status["status"].split()[-1]
    wait_state(dst.directory, clone_id, ("done",))
    for config, msg in ((src, job_id), (dst, clone_id)):
        folder = config.directory / "done" / msg.replace("/", "_")
        assert (folder / "attach" / "in.bin").read_bytes() == payload
    # The clone carried the reference (URL, size, MD5), never the bytes.
    meta = json.loads(
        (dst.directory / "done" / clone_id.replace("/", "_") / "msg.json").read_text()
    )
    [carried] = meta["envelope"]["attachments"]
    assert carried == {"name": "in.bin", "md5": md5, "url": ref.url, "size": len(payload)}


def test_a_hanging_endpoint_does_not_hold_up_deliveries_to_others(
    tmp_path: Path, recorder_factory: Callable[..., Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three messages for an endpoint that accepts and never answers, submitted first, then
    three for one that answers 200. One sender thread waited for the first answer (10 s
    an attempt, here made longer than the test) and every other delivery waited behind it;
    now the good endpoint's are delivered while the hanging one's first attempt still
    waits, and its other two wait for that one, not in a second connection."""
    monkeypatch.setattr(webhooks, "TIMEOUT_S", 600.0)
    silent, good = Silent(), recorder_factory([200])
    store = MessageStore(tmp_path)
    records: dict[str, Path] = {}
    for job_id in ("H1", "H2", "H3", "G1", "G2", "G3"):
        records[job_id] = store.move(store.enter_run(job_id, {}), "done", "ok") / "webhook.json"
    sender = WebhookSender(attempts=3, backoff=0.05)
    try:
        for job_id in ("H1", "H2", "H3"):
            assert sender.submit(silent.url, {"id": job_id}, store, job_id)
        wait_for(lambda: silent.connections, 20, "the first attempt at the hanging endpoint")
        for job_id in ("G1", "G2", "G3"):
            assert sender.submit(f"{good.url}/hook", {"id": job_id}, store, job_id)
        for job_id in ("G1", "G2", "G3"):
            wait_for(
                lambda job_id=job_id: (doc := webhook_record(records[job_id])) and doc["delivered"],
                20,
                f"{job_id} delivered to the endpoint that answers",
            )
        assert sorted(post["id"] for post in good.posts) == ["G1", "G2", "G3"]
        for job_id in ("H1", "H2", "H3"):
            record = webhook_record(records[job_id])
            assert record is not None
            assert (record["attempts"], record["delivered"], record["gave_up"]) == (0, False, False)
        assert len(silent.connections) == 1  # one attempt at a time per endpoint
        assert sender.pending() == 3
    finally:
        dropped = sender.close(0.1)
        silent.close()
    assert dropped == 3
    for job_id in ("H1", "H2", "H3"):
        record = webhook_record(records[job_id])
        assert record is not None and record["gave_up"] and record["errors"] == [webhooks.DROPPED]
