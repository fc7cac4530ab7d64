"""The message page's live log across the worker's rotations of stdio.log: written by the
worker's own writer (conveyor.worker.stdiolog.StdioLog), read by a real console's stream
and by conveyor.web.livelog directly."""

from __future__ import annotations

import html
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="pip install -e '.[web]'")
import httpx

from conveyor.web import livelog
from conveyor.worker.stdiolog import LogLimits, StdioLog
from tests.web.conftest import WebProcess

MAX_BYTES = 1024  # the smallest a queue may set (log_max_bytes)


def _lines(first: int, count: int) -> bytes:
    """Numbered lines, no two alike, so a piece missed or read twice shows."""
    return b"".join(b"line %05d of the script's output\n" % n for n in range(first, first + count))


def _message_dir(queues_dir: Path, msg_id: str) -> Path:
    directory = queues_dir / "jobs" / "run" / msg_id
    directory.mkdir(parents=True)
    doc = {"id": msg_id, "queue": "jobs", "envelope": {"params": {}, "count": 0}}
    (directory / "msg.json").write_text(json.dumps(doc))
    (directory / "status.json").write_text(json.dumps({"state": "run", "status": "running"}))
    return directory


class _LiveLog:
    """The text of the page's log pane as a browser would hold it from a stream's `log`
    events: a reset replaces it, anything else is appended."""

    def __init__(self, lines: Iterator[str]) -> None:
        self.lines = lines
        self.text = ""

    def read_until(self, wanted: str, max_lines: int = 60) -> str:
        """Apply events until the pane holds `wanted` or stops growing towards it; at most
        `max_lines` lines (a tick is at most two, one a second)."""
        for _ in range(max_lines):
            if self.text == wanted or len(self.text) > len(wanted):
                break
            line = next(self.lines)
            if not line.startswith("data: ") or '"html"' not in line:
                continue
            event = json.loads(line[len("data: ") :])
            piece = html.unescape(re.sub(r"<[^>]*>", "", event["html"]))
            self.text = piece if event["reset"] else self.text + piece
        return self.text


@pytest.mark.parametrize(
    "after_rotation",
    [pytest.param(10, id="new-file-shorter"), pytest.param(28, id="new-file-grew-past-offset")],
)
def test_live_log_goes_on_across_a_rotation(
    web: WebProcess, queues_dir: Path, after_rotation: int
) -> None:
    msg_id = f"D-0000{after_rotation:04x}-LiveLogRotationLiveLogRo-05a1"
    directory = _message_dir(queues_dir, msg_id)
    writer = StdioLog(directory / "stdio.log", LogLimits(max_bytes=MAX_BYTES, backups=2))
    try:
        first = _lines(0, 20)  # 680 bytes, within the first file
        writer.write(first)
        url = f"{web.url}/events/q/jobs/{msg_id}"
        with httpx.Client(timeout=15) as client, client.stream("GET", url) as stream:
            assert stream.status_code == 200
            pane = _LiveLog(stream.iter_lines())
            assert pane.read_until(first.decode()) == first.decode()
            # Between two polls: the file fills, becomes stdio.log.1, and the new one takes
            # `after_rotation` lines (10: shorter than the offset read; 28: longer).
            second = _lines(20, 10 + after_rotation)
            writer.write(second)
            assert (directory / "stdio.log.1").stat().st_size == MAX_BYTES
            whole = (first + second).decode()
            assert pane.read_until(whole) == whole
    finally:
        writer.close()


def _read_all(
    directory: Path, cursor: livelog.LogCursor, limit: int
) -> tuple[bytes, livelog.LogCursor]:
    """follow() until it has nothing more (bounded: each call returns at least a byte)."""
    data = b""
    for _ in range(200):
        piece, cursor = livelog.follow(directory, cursor, limit)
        if not piece:
            break
        data += piece
    return data, cursor


@pytest.mark.parametrize("limit", [100, 64 * 1024])
def test_follow_reads_every_file_of_two_rotations_in_order(tmp_path: Path, limit: int) -> None:
    writer = StdioLog(tmp_path / "stdio.log", LogLimits(max_bytes=MAX_BYTES, backups=3))
    try:
        writer.write(_lines(0, 10))
        data, cursor = livelog.tail(tmp_path, 256 * 1024)
        assert cursor is not None and data == _lines(0, 10)
        writer.write(_lines(10, 80))  # our file is now stdio.log.2, then .1, then the new one
        assert (tmp_path / "stdio.log.2").exists()
        rest, _ = _read_all(tmp_path, cursor, limit)
    finally:
        writer.close()
    assert rest == _lines(10, 80)


def test_follow_rereads_a_log_started_over_in_place(tmp_path: Path) -> None:
    # log_backups 0: the worker truncates stdio.log (same inode) and writes on from its start.
    writer = StdioLog(tmp_path / "stdio.log", LogLimits(max_bytes=MAX_BYTES, backups=0))
    try:
        writer.write(_lines(0, 20))
        _, cursor = livelog.tail(tmp_path, 256 * 1024)
        assert cursor is not None
        writer.write(_lines(20, 10 + 28))  # fills the file, which starts over and regrows
        started_over = (tmp_path / "stdio.log").read_bytes()
        assert cursor.offset < len(started_over) < MAX_BYTES
        rest, _ = _read_all(tmp_path, cursor, 64 * 1024)
    finally:
        writer.close()
    assert rest == started_over  # not its bytes past the old offset only


def test_follow_survives_the_message_moving_and_its_removal(tmp_path: Path) -> None:
    running = tmp_path / "run" / "D-1"
    running.mkdir(parents=True)
    writer = StdioLog(running / "stdio.log", LogLimits(max_bytes=MAX_BYTES, backups=2))
    writer.write(_lines(0, 5))
    writer.close()
    _, cursor = livelog.tail(running, 256 * 1024)
    assert cursor is not None
    done = tmp_path / "done" / "D-1"
    done.parent.mkdir()
    running.rename(done)  # the worker moves a finished message: the inode stays
    writer = StdioLog(done / "stdio.log", LogLimits(max_bytes=MAX_BYTES, backups=2))
    writer.write(_lines(5, 3))
    writer.close()
    rest, cursor = _read_all(done, cursor, 64 * 1024)
    assert rest == _lines(5, 3)
    shutil.rmtree(done)
    assert livelog.follow(done, cursor, 64 * 1024) == (b"", cursor)
