"""The console's pure parts: config.json loading, ANSI rendering, the CLI's errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conveyor.web.ansi import AnsiRenderer, render
from conveyor.web.config import WebConfigError, load_config


def _load(tmp_path: Path, doc: object) -> object:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return load_config(path)


def test_rq_config_loads_unchanged(tmp_path: Path) -> None:
    # Seed 004's sample config.json, as is.
    config = _load(
        tmp_path,
        {
            "env": "development",
            "host": "127.0.0.1",
            "port": "3333",
            "addr": "0.0.0.0",
            "tmpdir": "/tmp",
            "relative_root": "/therq",
            "basic_auth": {"realm": "Your RQ", "users": {"foo user": "bar pass"}},
        },
    )
    assert config.port == 3333 and config.addr == "0.0.0.0" and config.relative_root == "/therq"
    assert config.users == {"foo user": ("bar pass", "admin")} and config.realm == "Your RQ"
    assert config.public_host() == "127.0.0.1"
    defaults = load_config(None)
    assert (defaults.addr, defaults.port, defaults.relative_root) == ("127.0.0.1", 3333, "")
    assert not defaults.auth_enabled and defaults.nodes == ["127.0.0.1:7711"]


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"port": "http"}, "'port' must be a number"),
        ({"port": 70000}, "0..65535"),
        ({"relative_root": "therq"}, "relative_root"),
        ({"relative_root": "/a/../b"}, "not a clean path"),
        ({"basic_auth": {"users": {"a": "b"}}}, "needs 'realm' and 'users'"),
        (
            {"basic_auth": {"realm": "r", "users": {"a": {"password": "p", "role": "god"}}}},
            "role must be one of",
        ),
        ({"api_tokens": [{"token": "short"}]}, "at least 16"),
        ({"allow_new_queue": "yes"}, "true or false"),
        ({"nodes": []}, "at least one"),
        ({"prot": 1}, "unknown key"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_config_is_a_clear_error(tmp_path: Path, doc: object, words: str) -> None:
    with pytest.raises(WebConfigError, match=words):
        _load(tmp_path, doc)


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for args in (
        ["--config", str(bad)],
        ["--config", str(tmp_path / "none.json")],
        ["--port", "nope"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "conveyor.web.cli", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0
        assert "Traceback" not in done.stderr and done.stderr.strip(), done.stderr


def test_ansi_to_html() -> None:
    assert render("plain <b>&") == "plain &lt;b&gt;&amp;"
    assert render("\x1b[1;31mred\x1b[0m ok") == '<span class="a-b a-fg1">red</span> ok'
    assert render("\x1b[92mbright\x1b[39m") == '<span class="a-fg10">bright</span>'
    assert render("\x1b[38;5;4mblue\x1b[38;2;1;2;3m same") == (
        '<span class="a-fg4">blue</span><span class="a-fg4"> same</span>'
    )
    assert render("\x1b]0;title\x07\x1b[2Kgone\x07 bell") == "gone bell"
    # A colour and an escape split across two pieces of a streamed log.
    renderer = AnsiRenderer()
    first = renderer.feed("\x1b[32mgre")
    second = renderer.feed("en\x1b[")
    third = renderer.feed("0m after")
    assert first + second + third == (
        '<span class="a-fg2">gre</span><span class="a-fg2">en</span> after'
    )


def test_ansi_over_long_numbers_are_no_code() -> None:
    # int() refuses over 4300 digits: a log holding such a "colour" made the message page
    # answer 500 and broke its live log stream.
    assert render("\x1b[" + "9" * 5000 + "mtext").endswith("9m" + "text")
    assert render("\x1b[1;" + "9" * 100 + ";31mX") == '<span class="a-b a-fg1">X</span>'
    renderer = AnsiRenderer()
    streamed = renderer.feed("\x1b[" + "9" * 3000) + renderer.feed("9" * 3000 + "m after")
    assert (streamed + renderer.flush()).endswith("9m after")


def test_attachment_config_keys(tmp_path: Path) -> None:
    config = load_config(None, data_dir=str(tmp_path), max_attachment_mb=2)
    assert config.data_dir == tmp_path and config.max_attachment_bytes == 2 * 1024 * 1024
    assert load_config(None).data_dir is None
    for bad in (0, -1, "big", True, 1.5):
        with pytest.raises(WebConfigError, match="max_attachment_mb"):
            load_config(None, max_attachment_mb=bad)
    total = load_config(None, max_attachments_total_mb=3).max_attachments_total_bytes
    assert total == 3 * 1024 * 1024
    assert load_config(None).max_attachments_total_bytes == 10 * 1024**3
    for bad in (0, -1, "big", True, 1.5):
        with pytest.raises(WebConfigError, match="'max_attachments_total_mb' must be a whole"):
            load_config(None, max_attachments_total_mb=bad)


def test_attachment_store_writes_checks_and_cleans(tmp_path: Path) -> None:
    import hashlib
    import io
    import os

    from conveyor.web.attachments import AttachmentStore
    from conveyor.web.gateway import ApiError

    store = AttachmentStore(tmp_path / "attachments")
    stored = store.save_file("a.bin", io.BytesIO(b"abc" * 1000), limit=10_000)
    assert stored.md5 == hashlib.md5(b"abc" * 1000).hexdigest() and stored.size == 3000
    path = store.path(stored.id)
    assert path is not None and path.read_bytes() == b"abc" * 1000
    assert store.meta(stored.id) == {**store.meta(stored.id), "name": "a.bin", "size": 3000}
    with pytest.raises(ApiError) as too_big:
        store.save_bytes("b.bin", b"x" * 11, limit=10)
    assert too_big.value.status == 413
    assert list((tmp_path / "attachments" / "tmp").iterdir()) == []  # the .part removed
    for bad in ("../x", ".x", "a/b", "", "x\x00"):
        with pytest.raises(ApiError):
            store.writer(bad, 10)
    assert store.path("../../etc/passwd") is None and store.meta("A" * 32) is None
    old = path.stat().st_mtime - store.keep_s - 10
    os.utime(path, (old, old))
    assert store.clean() == 1 and store.path(stored.id) is None


def test_a_clean_removes_a_part_file_nothing_wrote_to_for_an_hour(tmp_path: Path) -> None:
    import os
    import time

    from conveyor.web.attachments import STALE_PART_S, AttachmentStore

    store = AttachmentStore(tmp_path / "attachments", max_total=1000)
    parts = tmp_path / "attachments" / "tmp"
    (parts / "left.part").write_bytes(b"x" * 600)  # a stopped console's, after the store opened
    (parts / "busy.part").write_bytes(b"y" * 100)  # another console's, still being written
    writer = store.writer("mine.bin", 1000)  # this store's own upload, never removed
    writer.write(b"z" * 10)
    long_ago = time.time() - STALE_PART_S - 10
    for part in (parts / "left.part", writer.part):
        os.utime(part, (long_ago, long_ago))
    store.clean()
    assert sorted(p.name for p in parts.iterdir()) == sorted(["busy.part", writer.part.name])
    assert store.used == 100 + 10  # the leftover no longer counted
    writer.abort()


def test_latency_histogram_as_prometheus_buckets() -> None:
    from conveyor.web.metrics import _buckets
    from conveyor.worker.registry import LATENCY_BUCKETS, Latency

    latency = Latency()
    for seconds in (0.001, 0.2, 0.2, 100.0):
        latency.observe(seconds)
    pairs, total = _buckets(latency.doc()) or ([], 0.0)
    as_dict = dict(pairs)
    assert as_dict["0.005"] == 1 and as_dict["0.25"] == 3 and as_dict["60.0"] == 3
    assert as_dict["+Inf"] == 4 and len(pairs) == len(LATENCY_BUCKETS) + 1
    assert total == pytest.approx(100.401)
    assert _buckets({"buckets": [1.0], "counts": [1]}) is None  # malformed: skipped
    assert _buckets("junk") is None


def test_schedules_of_a_cron_no_date_matches_have_no_next_run(tmp_path: Path) -> None:
    from conveyor.web.api_errors import schedules
    from conveyor.worker.queuedir import QueueConfig, ScheduleEntry

    # Built directly: loading config.json refuses such a cron, but a listing must not
    # fail (500 on the schedules API and the queue page) on one that got through.
    entries = [ScheduleEntry("0 0 30 2 *"), ScheduleEntry("* * * * *", {"param1": "p"})]
    config = QueueConfig(name="q", script="/bin/true", directory=tmp_path, schedule=entries)
    found = schedules(config)
    assert [s["next_run"] is None for s in found] == [True, False]
    assert found[1]["params"] == {"param1": "p"}


def test_errors_across_queues_read_only_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    from types import SimpleNamespace

    from conveyor.web import api_errors, workdirs
    from conveyor.worker.queuedir import MessageStore
    from tests.web.conftest import make_queue

    expected = []  # every err message, in the order the API lists them
    for name, count in (("a", 3), ("b", 4)):
        store = MessageStore(make_queue(tmp_path, name, Path("/bin/true")))
        for n in range(count):
            path = store.move(store.enter_run(f"D-{name}{n}", {"id": f"D-{name}{n}"}), "err", "x")
            os.utime(path, (1000.0 + n, 1000.0 + n))  # newer as n grows: listed first
        expected += [(name, f"D-{name}{n}") for n in reversed(range(count))]
    console: Any = SimpleNamespace(dirs=workdirs.QueueDirs([tmp_path]))
    reads = []
    summary = workdirs._summary
    monkeypatch.setattr(workdirs, "_summary", lambda *a: reads.append(a) or summary(*a))

    def page(offset: int, limit: int, search: str = "") -> tuple[int, list[tuple[str, str]]]:
        found = api_errors.errors(console, None, search, offset, limit)
        return found["total"], [(item["queue"], item["id"]) for item in found["items"]]

    # The page spans both queues; only its three messages are read, the rest counted.
    assert page(2, 3) == (7, expected[2:5]) and len(reads) == 3
    for offset, limit in ((0, 50), (0, 1), (3, 1), (3, 4), (6, 5), (7, 5), (100, 5)):
        assert page(offset, limit) == (7, expected[offset : offset + limit])
    assert page(1, 2, search="d-b") == (4, [("b", "D-b2"), ("b", "D-b1")])
    assert api_errors.errors(console, "b", "", 1, 2)["items"][0]["id"] == "D-b2"


def test_callers_waiting_on_a_hung_node_share_one_snapshot() -> None:
    # A node that accepts connections and never answers (a listening socket nobody
    # accepts on): each snapshot lasts the client's timeouts. Callers that queued behind
    # one used to take one each in turn, so the Nth page waited N times as long.
    import socket
    import threading

    from conveyor.web.gateway import Gateway
    from conveyor.web.sampler import Sampler, Snapshot
    from conveyor.web.workdirs import QueueDirs

    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        gateway = Gateway([f"127.0.0.1:{hung.getsockname()[1]}"], None, timeout_s=0.3)
        sampler = Sampler(gateway, QueueDirs([]), interval_s=0.1)
        start = threading.Barrier(3)
        taken: list[Snapshot] = []

        def ask() -> None:
            start.wait()
            taken.append(sampler.snapshot())

        threads = [threading.Thread(target=ask) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        gateway.close()
    assert len(taken) == 3 and taken[0].error is not None
    assert all(snap is taken[0] for snap in taken)


def test_a_node_no_longer_learnt_has_its_connection_closed(tmp_path: Path) -> None:
    # The console talks to each node HELLO shows; a node that leaves the cluster (a host
    # replaced under a new address) used to keep its client and sockets for good.
    from conveyor.web.gateway import Gateway
    from tests.servers import running_node
    from tests.web.conftest import wait_for

    def connections(redis: Any) -> int:
        return int(redis.info("clients")["connected_clients"])

    with running_node(tmp_path / "a") as seed, running_node(tmp_path / "b") as other:
        redis = other.client()
        before = connections(redis)
        gateway = Gateway([f"127.0.0.1:{seed.port}"], None)
        try:
            gateway.learn([f"127.0.0.1:{other.port}"])
            gateway.node(f"127.0.0.1:{other.port}").ping()
            assert connections(redis) == before + 1
            gateway.learn([])
            # The node sees the close a moment later: poll, bounded.
            wait_for(lambda: connections(redis) == before, "the connection closed")
        finally:
            gateway.close()
            redis.close()
