"""Live streams: at most `max_streams` open at once, each giving its slot back however it
ends; streams watching the same thing share one sample a second; the overview with no node
answering."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="pip install -e '.[web]'")
import httpx

from conveyor.client import Client
from conveyor.web import events
from conveyor.web.app import create_app
from conveyor.web.config import WebConfigError, load_config
from conveyor.web.gateway import ApiError
from conveyor.web.streams import SampleCache
from tests.conftest import free_port
from tests.servers import NodeProcess
from tests.web.conftest import WebProcess, make_queue, wait_for


@pytest.fixture(scope="module")
def two_streams_web(
    tmp_path_factory: pytest.TempPathFactory, node: NodeProcess, queues_dir: Path
) -> Iterator[WebProcess]:
    started = WebProcess(tmp_path_factory.mktemp("web2"), node, {"max_streams": 2}, queues_dir)
    yield started
    started.stop()


def _gauge(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=15).text
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def test_streams_past_max_streams_are_refused_until_one_ends(two_streams_web: WebProcess) -> None:
    url = two_streams_web.url
    with httpx.Client(timeout=10) as client, ExitStack() as open_streams:
        streams, readers = [], []  # a reader dropped would close its connection
        for path in ("/events/overview", "/events/workers"):
            stream = open_streams.enter_context(client.stream("GET", url + path))
            assert stream.status_code == 200
            readers.append(stream.iter_lines())
            assert next(readers[-1]) == "retry: 2000"
            streams.append(stream)
        assert _gauge(url, "conveyor_console_streams") == 2
        refused = client.get(url + "/events/q/jobs")
        assert refused.status_code == 503 and refused.headers["retry-after"] == "15"
        error = refused.json()["error"]
        assert error["code"] == "too_many_streams" and "2 live streams" in error["message"]
        # Pages themselves are not streams: still served.
        assert client.get(url + "/workers").status_code == 200

        streams[0].close()  # the client goes away: its slot comes back
        wait_for(lambda: _gauge(url, "conveyor_console_streams") == 1, "a slot freed")
        with client.stream("GET", url + "/events/q/jobs") as again:
            assert again.status_code == 200


@pytest.mark.parametrize("bad", [0, -1, True, "10", 1.5, 100_001])
def test_max_streams_must_be_a_sensible_whole_number(bad: object) -> None:
    with pytest.raises(
        WebConfigError, match=r"'max_streams' must be a whole number in 1\.\.100000"
    ):
        load_config(None, max_streams=bad)


def _asgi_scope(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 3333),
    }


async def _serve_stream(app: Any, way_out: str) -> None:
    """One /events/workers stream served by the app in this process (no node needed), as
    uvicorn would: cancelled (as at shutdown) once it sent its first chunk, left to end, or
    sent to a client that reads nothing after its first chunk (uvicorn's send then waits
    for the socket's buffers to drain, which never happens)."""
    first_chunk = asyncio.Event()
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            if first_chunk.is_set() and way_out == "client reads nothing":
                await never.wait()
            first_chunk.set()

    task = asyncio.create_task(app(_asgi_scope("/events/workers"), receive, send))
    await asyncio.wait_for(first_chunk.wait(), 10)
    if way_out == "cancelled at shutdown":
        task.cancel()
    # Bounded: a stream that never ends fails here instead of hanging the test.
    await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 20)


@pytest.mark.parametrize(
    "way_out", ["ten minutes over", "cancelled at shutdown", "client reads nothing"]
)
def test_a_stream_gives_its_slot_back(
    way_out: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if way_out == "ten minutes over":
        monkeypatch.setattr(events, "MAX_STREAM_S", 0.0)
    if way_out == "client reads nothing":
        monkeypatch.setattr(events, "SEND_STALL_S", 0.5, raising=False)
    config = load_config(None, nodes=f"127.0.0.1:{free_port()}", max_streams=1)
    app = create_app(config)
    the_console = app.fastapi.state.console  # type: ignore[attr-defined]
    try:
        asyncio.run(_serve_stream(app, way_out))
        assert the_console.streams.open == 0
        the_console.streams.take().release()  # the one slot can be taken again
    finally:
        the_console.close()


def _calls(node: NodeProcess, command: str) -> int:
    client = Client([f"127.0.0.1:{node.port}"])
    try:
        stat = client.info("commandstats").get(f"cmdstat_{command}") or {}
    finally:
        client.close()
    return int(stat.get("calls", 0))


@pytest.mark.parametrize(
    ("path", "command"), [("/events/q/shared", "qpeek"), ("/events/dead-letters", "config")]
)
def test_streams_on_one_page_share_its_sample(
    web: WebProcess, node: NodeProcess, path: str, command: str
) -> None:
    tabs, builds_each = 6, 2
    node.client().execute_command("ADDJOB", "shared", "body", 0)
    before = _calls(node, command)
    with httpx.Client(timeout=10) as client, ExitStack() as open_streams:
        streams = [
            open_streams.enter_context(client.stream("GET", web.url + path)) for _ in range(tabs)
        ]
        readers = []  # a reader dropped would close its connection
        for stream in streams:
            assert stream.status_code == 200
            lines = stream.iter_lines()
            readers.append(lines)
            # One event or idle comment per update the stream built.
            built = 0
            while built < builds_each:
                line = next(lines)
                built += line.startswith(("event:", ": idle"))
    calls = _calls(node, command) - before
    # Each stream asking for itself: tabs * builds_each calls at least (12); shared: one a
    # second whatever the number of tabs.
    assert 1 <= calls < tabs, calls


def test_sample_cache_shares_errors_and_stays_bounded() -> None:
    cache = SampleCache(ttl_s=60.0, max_entries=3)
    taken: list[str] = []

    def missing() -> None:
        taken.append("x")
        raise ApiError(404, "no_queue", "no queue 'x'")

    for _ in range(3):
        with pytest.raises(ApiError, match="no queue 'x'"):
            cache.get("x", missing)
    assert taken == ["x"]
    for key in range(10):
        assert cache.get(key, lambda key=key: key * 2) == key * 2
    assert len(cache) == 3


def test_overview_with_no_node_shows_queue_directories_from_disk(
    tmp_path: Path, queues_dir: Path
) -> None:
    parent = tmp_path / "queues"
    make_queue(parent, "offline", queues_dir / "script.sh")
    for name in ("D-1", "D-2"):
        (parent / "offline" / "err" / name).mkdir(parents=True)
    nobody = SimpleNamespace(port=free_port())  # nothing listens there
    web = WebProcess(tmp_path, nobody, {}, parent)  # type: ignore[arg-type]
    try:
        page = httpx.get(f"{web.url}/", timeout=15).text
        assert "node unreachable" in page and "No queues yet" not in page
        assert re.search(r'href="/q/offline\?state=err">2</a>', page), page
        metrics = httpx.get(f"{web.url}/metrics", timeout=15).text
        assert 'conveyor_messages{queue="offline",state="err"} 2.0' in metrics
        # The err link leads to the queue's messages on disk, not to a 503.
        queue_page = httpx.get(f"{web.url}/q/offline", params={"state": "err"}, timeout=15)
        assert queue_page.status_code == 200 and "node unreachable" in queue_page.text
        assert 'href="?state=err">2</a>' in queue_page.text
        missing = httpx.get(f"{web.url}/q/nodir", headers={"accept": "application/json"})
        assert missing.status_code == 503  # no directory to show: the node's error
        assert missing.json()["error"]["code"] == "node_unreachable"
    finally:
        web.stop()
