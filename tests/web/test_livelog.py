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


class _RestReader:
    """A REST client following the log: each GET gives back the X-Log-Cursor of the last."""

    def __init__(self, web: WebProcess, msg_id: str, limit: int) -> None:
        self.url = f"{web.url}/api/v1/queues/jobs/messages/{msg_id}/log"
        self.limit = limit
        self.cursor: str | None = None
        self.text = ""

    def get(self, **params: object) -> httpx.Response:
        answer = httpx.get(self.url, params={"limit": self.limit, **params}, timeout=15)
        assert answer.status_code == 200, answer.text
        return answer

    def read_all(self) -> str:
        """Until a read brings nothing (bounded: each read that brings something moves on)."""
        for _ in range(200):
            params = {} if self.cursor is None else {"cursor": self.cursor}
            answer = self.get(**params)
            self.cursor = answer.headers["x-log-cursor"]
            if not answer.text:
                break
            self.text += answer.text
        return self.text


@pytest.mark.parametrize(
    ("after_rotation", "backups"),
    [
        pytest.param(10, 2, id="new-file-shorter"),
        pytest.param(28, 2, id="new-file-grew-past-offset"),
        pytest.param(48, 2, id="rotated-twice"),
        pytest.param(28, 0, id="started-over-in-place"),
    ],
)
@pytest.mark.parametrize("limit", [100, 64 * 1024])
def test_rest_log_cursor_follows_rotations(
    web: WebProcess, queues_dir: Path, after_rotation: int, backups: int, limit: int
) -> None:
    msg_id = f"D-{after_rotation:04x}{backups:02x}{limit % 251:02x}-RestLogCursorRestLogCurs-05a1"
    directory = _message_dir(queues_dir, msg_id)
    reader = _RestReader(web, msg_id, limit)
    assert reader.read_all() == ""  # no log yet: a cursor for the one to come
    writer = StdioLog(directory / "stdio.log", LogLimits(max_bytes=MAX_BYTES, backups=backups))
    try:
        first = _lines(0, 20)
        writer.write(first)
        assert reader.read_all() == first.decode()
        second = _lines(20, 10 + after_rotation)
        writer.write(second)
        assert (directory / "stdio.log.1").exists() == (backups > 0)
        expected = second if backups else (directory / "stdio.log").read_bytes()
        assert reader.read_all() == (first + expected).decode()
    finally:
        writer.close()


def test_rest_log_cursor_keeps_characters_whole_and_offsets_still_work(
    web: WebProcess, queues_dir: Path
) -> None:
    msg_id = "D-0000beef-RestLogCharsRestLogChars-05a1"
    directory = _message_dir(queues_dir, msg_id)
    text = "é€😀 line " * 40
    (directory / "stdio.log").write_bytes(text.encode())
    reader = _RestReader(web, msg_id, limit=7)  # cuts characters at most reads
    assert reader.read_all() == text
    assert "\ufffd" not in reader.text
    # The old way: by offset, X-Log-Size the whole size; it gives a cursor to go on from.
    tail = reader.get(offset=-6)
    assert tail.text == " line " and tail.headers["x-log-size"] == str(len(text.encode()))
    with (directory / "stdio.log").open("ab") as log:
        log.write(b"more\n")
    after = reader.get(cursor=tail.headers["x-log-cursor"])
    assert after.text == "more\n"


@pytest.mark.parametrize("cursor", ["A" * 31, "A" * 33, "!" * 40, "A" * 120, "A=" * 20])
def test_rest_log_a_string_not_shaped_like_a_cursor_is_a_422(
    web: WebProcess, queues_dir: Path, cursor: str
) -> None:
    msg_id = "D-0000cafe-RestLogBadCursorRestLogB-05a1"
    if not (queues_dir / "jobs" / "run" / msg_id).exists():
        _message_dir(queues_dir, msg_id)
    url = f"{web.url}/api/v1/queues/jobs/messages/{msg_id}/log"
    answer = httpx.get(url, params={"cursor": cursor}, timeout=15)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "invalid"
    assert "cursor" in answer.json()["error"]["message"]


def test_rest_log_a_forged_cursor_reads_this_log_and_no_other(
    web: WebProcess, queues_dir: Path
) -> None:
    msg_id = "D-0000f00d-RestLogForgedCursorRestL-05a1"
    directory = _message_dir(queues_dir, msg_id)
    (directory / "stdio.log").write_bytes(_lines(0, 3))
    url = f"{web.url}/api/v1/queues/jobs/messages/{msg_id}/log"
    # Zeros: no file's identity, offset 0 (with offset, which a cursor replaces); and the
    # largest offset a cursor holds, with bytes seen that match nothing.
    for cursor in ("A" * 40, "_" * 118):
        answer = httpx.get(url, params={"cursor": cursor, "offset": 50}, timeout=15)
        assert answer.status_code == 200, answer.text
        assert answer.content == _lines(0, 3)
        assert re.fullmatch(livelog.CURSOR_RE, answer.headers["x-log-cursor"])
    assert "Traceback" not in web.output()
