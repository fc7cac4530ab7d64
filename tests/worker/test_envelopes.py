"""Job bodies no script can run: each ends in err at once with a status that says why,
never a worker that dies or a message delivered again and again."""

from __future__ import annotations

import errno
import hashlib
import http.server
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conveyor.client import Client
from conveyor.worker import attachments
from conveyor.worker.envelope import Attachment, Envelope, EnvelopeError
from conveyor.worker.queuedir import dir_name
from conveyor.worker.script import ScriptHooks, run_script
from tests.servers import NodeProcess
from tests.worker.conftest import WorkerProcess, make_queue, wait_for, wait_state, write_script

QUEUE = "envelopes"
HI_MD5 = hashlib.md5(b"hi").hexdigest()


def _hi(**fields: object) -> bytes:
    """A body with one inline attachment "hi" (good data and MD5), `fields` replacing its own."""
    attachment = {"name": "hi", "md5": HI_MD5, "data": "aGk=", **fields}
    return json.dumps({"attachments": [attachment]}).encode()


# A producer that does not go through the console can send any of these.
BAD = {
    "nul_param": (
        b'{"params": {"param1": "a\\u0000b"}}',
        "not a message envelope: a param holds a NUL byte",
    ),
    "count_1e999": (
        b'{"params": {}, "count": 1e999}',
        "not a message envelope: 'count' must be an integer, got 1e999",
    ),
    "nested_too_deeply": (b"[" * 100_000, "not a message envelope: job body is JSON nested"),
    # int() of more than 4300 digits raised a ValueError no one caught: the slot failed
    # and the message came back after each RETRY, for ever.
    "count_of_5000_digits": (
        b'{"count": ' + b"1" * 5000 + b"}",
        "not a message envelope: job body is not JSON: Exceeds the limit (4300 digits)",
    ),
    # str() made these "None", "True", "[1, 2]" and "{'a': 1}": run with a param never sent.
    **{
        f"param_{name}": (
            b'{"params": {"param1": "ok", "param2": ' + value + b"}}",
            "not a message envelope: 'param2' must be a string or a number (params are the "
            f"script's RQ_PARAMn environment variables), got {shown}",
        )
        for name, value, shown in [
            ("null", b"null", "null"),
            ("true", b"true", "true"),
            ("false", b"false", "false"),
            ("list", b"[1, 2]", "a list"),
            ("object", b'{"a": 1}', "an object"),
            ("nan", b"NaN", "NaN"),
        ]
    },
    # str() made null "None" (a webhook URL, an attachment named "None"), bool() read
    # "false" as true and int() read 2.7 as 2, true as 1 and "3" as 3: each ran as if sent.
    **{
        name: (body, f"not a message envelope: {reason}")
        for name, body, reason in [
            ("origin_number", b'{"origin": 5}', "'origin' must be a string, got 5"),
            (
                "idempotency_key_true",
                b'{"idempotency_key": true}',
                "'idempotency_key' must be a string, got true",
            ),
            ("webhook_number", b'{"webhook": 5}', "'webhook' must be a string, got 5"),
            (
                "webhook_list",
                b'{"webhook": ["http://h/"]}',
                "'webhook' must be a string, got a list",
            ),
            (
                "force_remote_text",
                b'{"force_remote": "false"}',
                "'force_remote' must be true or false, got \"false\"",
            ),
            (
                "force_remote_0",
                b'{"force_remote": 0}',
                "'force_remote' must be true or false, got 0",
            ),
            ("count_float", b'{"count": 2.7}', "'count' must be an integer, got 2.7"),
            ("count_2_0", b'{"count": 2.0}', "'count' must be an integer, got 2.0"),
            ("count_true", b'{"count": true}', "'count' must be an integer, got true"),
            ("count_text", b'{"count": "3"}', "'count' must be an integer, got \"3\""),
            (
                "max_count_text",
                b'{"max_count": "15"}',
                "'max_count' must be an integer, got \"15\"",
            ),
            ("tick_float", b'{"tick": 1.5}', "'tick' must be an integer, got 1.5"),
            ("due_at_text", b'{"due_at": "5"}', "'due_at' must be a finite number, got \"5\""),
            ("due_at_true", b'{"due_at": true}', "'due_at' must be a finite number, got true"),
            (
                "attachments_text",
                b'{"attachments": "a"}',
                "'attachments' must be a list, got \"a\"",
            ),
            (
                "attachment_text",
                b'{"attachments": ["url"]}',
                "each of 'attachments' must be an object, got \"url\"",
            ),
            (
                "attachment_name_null",
                _hi(name=None),
                "attachment 'name' must be a string, got null",
            ),
            ("attachment_name_number", _hi(name=7), "attachment 'name' must be a string, got 7"),
            (
                "attachment_md5_null",
                _hi(md5=None),
                "attachment 'hi' 'md5' must be a string, got null",
            ),
            ("attachment_url_number", _hi(url=5), "attachment 'hi' 'url' must be a string, got 5"),
            (  # a reason stays short whatever the name's length
                "attachment_long_name_md5_number",
                _hi(name="n" * 100_000, md5=5),
                f"attachment {'n' * 60!r} 'md5' must be a string, got 5",
            ),
            (
                "attachment_size_text",
                _hi(url="http://127.0.0.1:1/hi", size="2"),
                "attachment 'hi' 'size' must be an integer, got \"2\"",
            ),
            (
                "attachment_size_negative",
                _hi(url="http://127.0.0.1:1/hi", size=-1),
                "attachment 'hi' 'size' must not be negative, got -1",
            ),
            ("count_negative", b'{"count": -1}', "'count' must not be negative, got -1"),
            (
                "max_count_negative",
                b'{"max_count": -3}',
                "'max_count' must not be negative, got -3",
            ),
            ("tick_negative", b'{"tick": -1}', "'tick' must not be negative, got -1"),
        ]
    },
    # 256 bytes: "<name>.part" could never be a file name (255 bytes at most).
    "long_attachment_name": (
        Envelope(
            attachments=[Attachment("é" * 128, b"hi", hashlib.md5(b"hi").hexdigest())]
        ).to_json(),
        "attachment name over 250 bytes in UTF-8 (256)",
    ),
    # URLs no fetch can use: one made the slot fail (back after RETRY, for ever), the
    # others were fetched again and again until max_count.
    "attachment_url_unclosed_ipv6": (
        b'{"attachments": [{"name": "a", "md5": "0", "url": "http://[::1/a"}]}',
        "attachment 'a': bad URL: Invalid IPv6 URL",
    ),
    "attachment_url_no_host": (
        b'{"attachments": [{"name": "a", "md5": "0", "url": "http:///a"}]}',
        "attachment 'a': bad URL: no host",
    ),
    "attachment_url_port": (
        b'{"attachments": [{"name": "a", "md5": "0", "url": "http://h:x/a"}]}',
        "attachment 'a': bad URL: Port could not be cast",
    ),
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


class _Hi(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"hi")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hi_url() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hi"
    server.shutdown()
    server.server_close()


def test_attachment_names_that_cannot_be_files_are_bad_envelopes(
    tmp_path: Path, hi_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    md5 = hashlib.md5(b"hi").hexdigest()
    # 252 bytes fit a file name, not "<name>.part": the fetch failed and was tried again.
    for name in ("a" * 252, "é" * 128, "\ud800"):
        for attachment in (Attachment(name, b"", md5, hi_url, 2), Attachment(name, b"hi", md5)):
            with pytest.raises(EnvelopeError, match="attachment name"):
                attachments.write_all([attachment], tmp_path / "attach")
    attachments.write_all([Attachment("é" * 125, b"", md5, hi_url, 2)], tmp_path / "fetched")
    assert (tmp_path / "fetched" / ("é" * 125)).read_bytes() == b"hi"  # 250 bytes: fits

    # A file system with a shorter limit than 255 bytes: refused there just the same.
    def too_long(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))

    monkeypatch.setattr(Path, "write_bytes", too_long)
    monkeypatch.setattr(attachments, "open", too_long, raising=False)
    for attachment in (Attachment("b" * 200, b"", md5, hi_url, 2), Attachment("c", b"hi", md5)):
        with pytest.raises(EnvelopeError, match="too long for this file system"):
            attachments.write_all([attachment], tmp_path / "short")


def test_params_are_strings_as_sent_and_numbers_as_their_json_text(
    client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    script = write_script(
        tmp_path / "params.sh",
        '#!/bin/bash\necho "done [$RQ_PARAM1][$RQ_PARAM2][$RQ_PARAM3][$RQ_PARAM4]" >&$RQ_WRITE\n',
    )
    queue_dir = make_queue(tmp_path, "param_texts", script, retry=5)
    start_worker(str(queue_dir))
    body = b'{"params": {"param1": "a b", "param2": 3, "param3": 1.50, "param4": -2e3}}'
    job_id = client.add_job("param_texts", body, retry=5)
    found = wait_state(queue_dir, job_id, ("done", "err"), timeout=20)
    assert found["status"] == "[a b][3][1.50][-2e3]", found
    msg = json.loads((queue_dir / "done" / dir_name(job_id) / "msg.json").read_text())
    params = {"param1": "a b", "param2": "3", "param3": "1.50", "param4": "-2e3"}
    assert msg["envelope"]["params"] == params


def test_a_bad_body_keeps_a_bounded_prefix_and_its_size_in_msg_json(
    client: Client, worker: WorkerProcess, queue_dir: Path
) -> None:
    # Kept whole, each such body (the node takes up to 512 MB) was copied to the disk.
    big = b"not json " + b"\xe9" * (2 * 1024 * 1024)
    small = b"not json either"
    big_id, small_id = client.add_job(QUEUE, big, retry=2), client.add_job(QUEUE, small, retry=2)
    for job_id in (big_id, small_id):
        assert wait_state(queue_dir, job_id, ("err",), timeout=10)["status"].startswith(
            "not a message envelope: job body is not JSON"
        )
    msg_path = queue_dir / "err" / dir_name(big_id) / "msg.json"
    msg = json.loads(msg_path.read_text())
    assert msg["body"] == big[:65536].decode("latin-1")
    note = f"the first 65536 of {len(big)} bytes"
    assert (msg["body_size"], msg["body_note"]) == (len(big), note)
    assert msg_path.stat().st_size < 7 * 65536  # \u00e9 in JSON: 6 bytes for each one
    small_msg = json.loads((queue_dir / "err" / dir_name(small_id) / "msg.json").read_text())
    assert small_msg == {"id": small_id, "body": "not json either"}


NULL_IS_THE_DEFAULT = {
    "webhook": b'{"webhook": null}',
    "origin": b'{"origin": null}',
    "idempotency_key": b'{"idempotency_key": null}',
    "count_and_max_count": b'{"count": null, "max_count": null}',
    "params_and_attachments": b'{"params": null, "attachments": null}',
    "attachment_url": _hi(url=None),
}


@pytest.mark.parametrize("case", sorted(NULL_IS_THE_DEFAULT))
def test_a_null_field_is_its_default(
    case: str, client: Client, tmp_path: Path, start_worker: Callable[..., WorkerProcess]
) -> None:
    # str() made a null webhook the URL "None" (a delivery given up), a null origin
    # RQ_ORIG_MSG_ID=None and a null idempotency key "None" (each message after the first
    # one "duplicate relay of None; not run"); int(None) and iterating None sent the
    # message to err; a null url fetched "None".
    script = write_script(
        tmp_path / "defaults.sh",
        "#!/bin/bash\n"
        '[ "$RQ_ORIG_MSG_ID" = "$RQ_FULL_MSG_ID" ] && origin=own || origin="$RQ_ORIG_MSG_ID"\n'
        'echo "done [$origin][$RQ_COUNT][$RQ_FORCE_REMOTE][$(ls ../attach)]" >&$RQ_WRITE\n',
    )
    queue_dir = make_queue(tmp_path, f"null_{case}", script, retry=5)
    start_worker(str(queue_dir))
    body = NULL_IS_THE_DEFAULT[case]
    # One worker slot: the second runs once the first has settled (webhook.json included).
    first, second = (client.add_job(f"null_{case}", body, retry=5) for _ in range(2))
    attached = "hi" if case == "attachment_url" else ""
    for job_id in (first, second):
        found = wait_state(queue_dir, job_id, ("done", "err"), timeout=20)
        assert found["status"] == f"[own][0][][{attached}]", found
        done = queue_dir / "done" / dir_name(job_id)
        assert not (done / "webhook.json").exists()
        assert "webhook" not in json.loads((done / "msg.json").read_text())["envelope"]
