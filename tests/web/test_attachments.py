"""Attachments stored on the console's disk, referenced by jobs, fetched by workers with their
MD5 checked, through `dup` too; and every way an upload can be refused."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="pip install -e '.[web]'")
import httpx
import psutil

from conveyor.web.attachments import STALE_PART_S
from tests.servers import NodeProcess
from tests.web.conftest import Background, WebProcess, make_queue, wait_for

BIG = 200 * 1024 * 1024
RAW = {"content-type": "application/octet-stream"}
# Clones its message (attachments included) to big_dst, then ends done.
DUP_SCRIPT = """#!/bin/bash
echo "dup 0-X-big_dst" >&$RQ_WRITE
read -u $RQ_READ reply
case "$reply" in
  ok*) echo "done cloned: $reply" >&$RQ_WRITE;;
  *) echo "err $reply" >&$RQ_WRITE;;
esac
"""
# Reports the MD5 of the attachment it was given, as the worker wrote it in attach/.
MD5_SCRIPT = """#!/bin/bash
sum=$(md5sum "$RQ_MSG_DIR/../attach/big.bin" | cut -d' ' -f1)
echo "done md5 $sum" >&$RQ_WRITE
"""


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def big_queues(tmp_path_factory: pytest.TempPathFactory) -> Path:
    parent = tmp_path_factory.mktemp("bigq")
    make_queue(parent, "big_src", _script(parent / "dup.sh", DUP_SCRIPT), retry=120)
    make_queue(parent, "big_dst", _script(parent / "md5.sh", MD5_SCRIPT), retry=120)
    return parent


@pytest.fixture(scope="module")
def big_worker(
    tmp_path_factory: pytest.TempPathFactory, node: NodeProcess, big_queues: Path
) -> Iterator[Background]:
    command = [sys.executable, "-m", "conveyor.cli", "worker", "-v", "--grace", "2"]
    command += ["--nodes", f"127.0.0.1:{node.port}"]
    command += [str(big_queues / "big_src"), str(big_queues / "big_dst")]
    started = Background(command, tmp_path_factory.mktemp("bigw") / "worker.log")
    yield started
    started.stop()


@pytest.fixture(scope="module")
def store_web(
    tmp_path_factory: pytest.TempPathFactory, node: NodeProcess, big_queues: Path
) -> Iterator[WebProcess]:
    data_dir = tmp_path_factory.mktemp("webdata")
    started = WebProcess(data_dir, node, {"data_dir": str(data_dir)}, big_queues)
    started.data_dir = data_dir  # type: ignore[attr-defined]
    yield started
    started.stop()


class RssWatch:
    """The highest RSS of a process, sampled in a thread until stopped."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.before = self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.process.memory_info().rss


def _big_file(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "wb") as out:
        for _ in range(BIG // (4 * 1024 * 1024)):
            chunk = os.urandom(4 * 1024 * 1024)
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def _message(base: str, queue: str, msg_id: str, state: str) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        response = httpx.get(f"{base}/api/v1/queues/{queue}/messages/{msg_id}", timeout=15)
        doc = response.json() if response.status_code == 200 else None
        return doc if doc and doc["state"] == state else None

    return wait_for(ended, f"{queue} message in {state}", timeout_s=110)


@pytest.mark.slow
def test_200mb_attachment_dup_and_fetch_leave_the_node_small(
    store_web: WebProcess, node: NodeProcess, big_worker: Background, tmp_path: Path
) -> None:
    source = tmp_path / "big.bin"
    expected = _big_file(source)
    node_rss = RssWatch(node.process.pid)
    web_rss = RssWatch(store_web.process.pid)
    with open(source, "rb") as body:
        uploaded = httpx.post(
            f"{store_web.url}/api/v1/attachments",
            params={"name": "big.bin"},
            content=body,
            headers={"content-type": "application/octet-stream"},
            timeout=120,
        )
    assert uploaded.status_code == 201, uploaded.text
    stored = uploaded.json()
    assert stored["md5"] == expected and stored["size"] == BIG
    added = httpx.post(
        f"{store_web.url}/api/v1/queues/big_src/messages",
        json={
            "params": {"param1": "big"},
            "attachments": [{"name": "big.bin", "ref": stored["id"]}],
        },
        timeout=15,
    )
    assert added.status_code == 201, added.text
    src = _message(store_web.url, "big_src", added.json()["id"], "done")
    clone_id = src["status"].split()[-1]
    dst = _message(store_web.url, "big_dst", clone_id, "done")
    node_after, web_after = node_rss.stop(), web_rss.stop()
    mb = 1024 * 1024
    print(
        f"\n200 MB attachment: node RSS before {node_rss.before / mb:.1f} MB, "
        f"peak {node_rss.peak / mb:.1f} MB, after {node_after / mb:.1f} MB "
        f"(growth {(node_rss.peak - node_rss.before) / mb:.1f} MB); console RSS before "
        f"{web_rss.before / mb:.1f} MB, peak {web_rss.peak / mb:.1f} MB, "
        f"after {web_after / mb:.1f} MB"
    )
    assert dst["status"] == f"md5 {expected}"  # the clone's worker got it whole
    assert dst["attachments"][0]["md5"] == expected and dst["attachments"][0]["size"] == BIG
    assert node_rss.peak - node_rss.before < 8 * mb
    assert web_rss.peak - web_rss.before < 64 * mb  # streamed: never the whole file


def test_stored_attachment_served_by_its_id_only(store_web: WebProcess) -> None:
    answer = httpx.post(
        f"{store_web.url}/api/v1/attachments",
        params={"name": "small.txt"},
        content=b"hello\n",
        headers=RAW,
        timeout=15,
    )
    assert answer.status_code == 201
    doc = answer.json()
    assert doc["md5"] == hashlib.md5(b"hello\n").hexdigest() and doc["size"] == 6
    fetched = httpx.get(doc["url"], timeout=15)
    assert fetched.content == b"hello\n" and fetched.headers["x-md5"] == doc["md5"]
    on_disk = store_web.data_dir / "attachments" / doc["id"][:2] / doc["id"]  # type: ignore[attr-defined]
    assert on_disk.read_bytes() == b"hello\n"
    for bad in ("x" * 32, "short", "..%2F..%2Fetc"):
        response = httpx.get(f"{store_web.url}/attachments/{bad}", timeout=15)
        assert response.status_code == 404 and "error" in response.json()


def _refused(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def test_bad_uploads_are_4xx(tmp_path: Path, node: NodeProcess, big_queues: Path) -> None:
    small = WebProcess(
        tmp_path, node, {"data_dir": str(tmp_path), "max_attachment_mb": 1}, big_queues
    )
    try:
        api = f"{small.url}/api/v1"
        over = b"x" * (1024 * 1024 + 1)
        _refused(
            httpx.post(f"{api}/attachments", params={"name": "a"}, content=over, headers=RAW),
            413,
            "too_large",
        )

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted while streaming
            yield over

        _refused(
            httpx.post(f"{api}/attachments", params={"name": "a"}, content=chunks(), headers=RAW),
            413,
            "too_large",
        )
        assert not list((tmp_path / "attachments" / "tmp").iterdir())  # the .part is gone
        files = {"attachment": ("a.bin", over, "application/octet-stream")}
        _refused(httpx.post(f"{small.url}/q/big_dst/new_message", files=files), 413, "too_large")
        # No Content-Type: no body was meant (an empty body would be an empty file).
        _refused(httpx.post(f"{api}/attachments", params={"name": "a"}), 400, "no_body")
        for name in ("../x", ".hidden", ""):
            response = httpx.post(
                f"{api}/attachments", params={"name": name}, content=b"x", headers=RAW
            )
            assert response.status_code == 422, (name, response.text)
        ref = {"name": "a", "ref": "A" * 32}
        message = {"attachments": [ref]}
        _refused(httpx.post(f"{api}/queues/big_dst/messages", json=message), 404, "no_attachment")
        both = {"attachments": [{**ref, "data": "eA=="}]}
        _refused(httpx.post(f"{api}/queues/big_dst/messages", json=both), 422, "invalid")
        neither = {"attachments": [{"name": "a"}]}
        _refused(httpx.post(f"{api}/queues/big_dst/messages", json=neither), 422, "invalid")
    finally:
        small.stop()


def test_no_store_is_a_409(tmp_path: Path, node: NodeProcess, big_queues: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    web = WebProcess(tmp_path, node, {"data_dir": str(not_a_dir)}, big_queues)
    try:
        answer = httpx.post(
            f"{web.url}/api/v1/attachments", params={"name": "a"}, content=b"x", headers=RAW
        )
        _refused(answer, 409, "no_attachment_store")
        form = {"x_format": "json"}
        files = {"attachment": ("a.txt", b"x", "text/plain")}
        answer = httpx.post(f"{web.url}/q/big_dst/new_message", data=form, files=files)
        _refused(answer, 409, "no_attachment_store")
        # Without attachments a message needs no store.
        plain = httpx.post(f"{web.url}/api/v1/queues/big_dst/messages", json={"params": {}})
        assert plain.status_code == 201
    finally:
        web.stop()


def test_attachment_urls_need_no_credentials_but_uploads_do(
    tmp_path: Path, node: NodeProcess, big_queues: Path
) -> None:
    config = {"data_dir": str(tmp_path), "basic_auth": {"realm": "r", "users": {"ops": "pw"}}}
    web = WebProcess(tmp_path, node, config, big_queues)
    try:
        url = f"{web.url}/api/v1/attachments"
        _refused(
            httpx.post(url, params={"name": "a"}, content=b"x", headers=RAW), 401, "unauthorized"
        )
        doc = httpx.post(
            url, params={"name": "a"}, content=b"x", auth=("ops", "pw"), headers=RAW
        ).json()
        assert httpx.get(doc["url"]).content == b"x"  # a worker holds no console password
        _refused(httpx.delete(doc["url"]), 403, "read_only")
        assert json.loads(httpx.get(f"{web.url}/api/v1/queues", auth=("ops", "pw")).text)
    finally:
        web.stop()


def test_the_store_is_bounded_in_total_size(
    tmp_path: Path, node: NodeProcess, big_queues: Path
) -> None:
    config = {"data_dir": str(tmp_path), "max_attachments_total_mb": 1}
    bounded = WebProcess(tmp_path, node, config, big_queues)
    store = tmp_path / "attachments"
    try:
        api = f"{bounded.url}/api/v1"
        piece = b"x" * (600 * 1024)
        first = httpx.post(f"{api}/attachments", params={"name": "a"}, content=piece, headers=RAW)
        assert first.status_code == 201, first.text

        def chunks() -> Iterator[bytes]:  # no Content-Length: refused while streaming
            yield piece[: 300 * 1024]
            yield piece[300 * 1024 :]

        # Declared (refused before the body is read), streamed, inline base64, a form file.
        _refused(
            httpx.post(f"{api}/attachments", params={"name": "b"}, content=piece, headers=RAW),
            507,
            "store_full",
        )
        _refused(
            httpx.post(f"{api}/attachments", params={"name": "b"}, content=chunks(), headers=RAW),
            507,
            "store_full",
        )
        inline = {"attachments": [{"name": "b", "data": base64.b64encode(piece).decode()}]}
        answer = httpx.post(f"{api}/queues/big_dst/messages", json=inline)
        _refused(answer, 507, "store_full")
        files = {"attachment": ("b.bin", piece, "application/octet-stream")}
        answer = httpx.post(f"{bounded.url}/q/big_dst/new_message", files=files)
        _refused(answer, 507, "store_full")
        assert not list((store / "tmp").iterdir())  # nothing partial left
        stored = sorted(p.name for p in store.glob("*/*") if p.parent.name != "tmp")
        assert stored == sorted([first.json()["id"], first.json()["id"] + ".json"])
        # An expired attachment goes first: then the same upload fits.
        month_ago = time.time() - 31 * 86400
        for path in store.glob("*/*"):
            os.utime(path, (month_ago, month_ago))
        again = httpx.post(f"{api}/attachments", params={"name": "b"}, content=piece, headers=RAW)
        assert again.status_code == 201, again.text
        assert httpx.get(first.json()["url"]).status_code == 404
        assert httpx.get(again.json()["url"]).content == piece
    finally:
        bounded.stop()


def test_leftover_part_files_are_removed_when_the_store_opens(
    tmp_path: Path, node: NodeProcess, big_queues: Path
) -> None:
    # Two uploads a killed console left half-written two hours ago (far from the 30 days
    # after which attachments expire): 900 KiB that would count against the 1 MiB bound.
    # A third, written to a moment ago, may be another console's upload in progress.
    parts = tmp_path / "attachments" / "tmp"
    parts.mkdir(parents=True)
    (parts / "a.part").write_bytes(b"a" * (500 * 1024))
    (parts / "b.part").write_bytes(b"b" * (400 * 1024))
    two_hours_ago = time.time() - 2 * STALE_PART_S
    for name in ("a.part", "b.part"):
        os.utime(parts / name, (two_hours_ago, two_hours_ago))
    (parts / "c.part").write_bytes(b"c" * (10 * 1024))
    config = {"data_dir": str(tmp_path), "max_attachments_total_mb": 1}
    web = WebProcess(tmp_path, node, config, big_queues)
    try:
        piece = b"x" * (600 * 1024)
        api = f"{web.url}/api/v1"
        answer = httpx.post(f"{api}/attachments", params={"name": "a"}, content=piece, headers=RAW)
        assert answer.status_code == 201, answer.text  # was 507 store_full: 900 KiB counted
        assert [part.name for part in parts.iterdir()] == ["c.part"]
        assert httpx.get(answer.json()["url"]).content == piece
        output = web.output()
    finally:
        web.stop()
    removed = [line for line in output.splitlines() if ".part" in line]
    assert len(removed) == 1, output
    assert f"removed 2 unfinished upload(s) (.part) of {900 * 1024} bytes" in removed[0]
