"""Server-sent events: each page's live stream.

Every second a stream re-renders its page's fragments and sends those that changed
(`event: fragments`, `{element id: html}`); the message page's stream also sends the log as
it grows (`event: log`, the first one with `reset`). A stream ends after MAX_STREAM_S and the
browser's EventSource reconnects by itself, so no stream lives forever; one whose browser
went away stops at its next tick. Each holds one of the console's `max_streams` slots until
it ends, whichever way (see conveyor.web.streams); streams watching the same queue, message
or dead letters share one sample a second.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import Message, Receive, Scope, Send

from conveyor.web import livelog, pages_ops, views, workdirs
from conveyor.web.ansi import AnsiRenderer
from conveyor.web.console import Console, base_url, console
from conveyor.web.gateway import ApiError
from conveyor.web.pages import STATE
from conveyor.web.streams import StreamSlot

router = APIRouter(include_in_schema=False)
log = logging.getLogger("conveyor.web")
TICK_S = 1.0
MAX_STREAM_S = 600.0
LOG_CHUNK = 256 * 1024
# Every stream sends at least a comment a second: a client that takes nothing for this long
# has stopped reading (or its network has), and its stream ends.
SEND_STALL_S = 60.0

Events = list[tuple[str, Any]]


def _event(name: str, data: Any) -> bytes:
    # JSON has no raw newline, so one `data:` line carries the whole payload.
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def _stream(request: Request, build: Callable[[], Events]) -> AsyncIterator[bytes]:
    sent: dict[str, str] = {}
    deadline = time.monotonic() + MAX_STREAM_S
    yield b"retry: 2000\n\n"
    while time.monotonic() < deadline and not await request.is_disconnected():
        try:
            events = await run_in_threadpool(build)
        except ApiError as exc:
            events = [("problem", {"message": exc.message})]
        except Exception as exc:  # keep the stream: the next tick may work again
            log.exception("live update failed")
            events = [("problem", {"message": f"update failed: {type(exc).__name__}"})]
        quiet = True
        for name, data in events:
            if name == "fragments":
                data = {k: v for k, v in data.items() if sent.get(k) != v}
                sent.update(data)
                if not data:
                    continue
            quiet = False
            yield _event(name, data)
        if quiet:
            yield b": idle\n\n"  # lets a proxy, and the stream's end, notice a dead client
        await asyncio.sleep(TICK_S)


class _Stalled(Exception):
    """The client took nothing of what the stream sent for SEND_STALL_S."""


class _SlotResponse(StreamingResponse):
    """A stream that gives its slot back however it ends: its 10 minutes over, the client
    gone (an error writing, or Starlette cancelling it), the server shutting down (the
    task cancelled), or the client connected but reading nothing. That last one would
    otherwise hold its slot for as long as it keeps the connection: a send waits while the
    socket's buffers are full, so the stream never comes back to its loop's deadline."""

    def __init__(self, slot: StreamSlot, stream: AsyncIterator[bytes]) -> None:
        super().__init__(
            stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def bounded_send(message: Message) -> None:
            try:
                await asyncio.wait_for(send(message), SEND_STALL_S)
            except TimeoutError:
                raise _Stalled from None

        try:
            await super().__call__(scope, receive, bounded_send)
        except _Stalled:
            log.info(
                "stream %s ended: its client read nothing for %s s", scope["path"], SEND_STALL_S
            )
        finally:
            self.slot.release()


def _response(request: Request, build: Callable[[], Events]) -> StreamingResponse:
    # Taken last, so nothing between here and the response being served can raise.
    slot = console(request).streams.take()
    return _SlotResponse(slot, _stream(request, build))


@router.get("/events/overview")
def overview_events(request: Request, c: Console = Depends(console)) -> StreamingResponse:
    env = request.app.state.templates
    base = views.base_context(c, request)

    def build() -> Events:
        context = {**base, **views.overview(c)}
        return [("fragments", views.fragments(env, views.OVERVIEW_FRAGMENTS, context))]

    return _response(request, build)


@router.get("/events/q/{queue}")
def queue_events(
    request: Request,
    queue: str,
    state: STATE = "err",
    offset: int = Query(0, ge=0, le=workdirs.SCAN_LIMIT),
    search: str = Query("", max_length=200),
    c: Console = Depends(console),
) -> StreamingResponse:
    env = request.app.state.templates
    base = views.base_context(c, request)

    def build() -> Events:
        page = c.samples.get(
            ("queue", queue, state, offset, search),
            lambda: views.queue_page(c, queue, state, offset, search),
        )
        context = {**base, **page}
        return [("fragments", views.fragments(env, views.QUEUE_FRAGMENTS, context))]

    return _response(request, build)


class _LogFollower:
    """The log from where the page's first event left it, decoded and rendered in pieces
    with one decoder and one ANSI renderer, so characters and colours split between two
    pieces come out whole. The cursor knows which file it read (conveyor.web.livelog): a
    log rotated between two polls is finished from stdio.log.1, then read on from the new
    file's start."""

    def __init__(self, c: Console, queue: str, msg_id: str) -> None:
        self.c, self.queue, self.msg_id = c, queue, msg_id
        self.started = False
        self.cursor: livelog.LogCursor | None = None
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.renderer = AnsiRenderer()

    def _directory(self) -> Path | None:
        config = self.c.dirs.get(self.queue)
        if config is None:
            if not self.started:
                raise ApiError(404, "no_queue_dir", f"no queue directory for {self.queue!r}")
            return None
        found = workdirs.find(config, self.msg_id)
        return found[1] if found else None

    def _html(self, data: bytes) -> str:
        return self.renderer.feed(self.decoder.decode(data))

    def poll(self) -> Events:
        directory = self._directory()
        if not self.started:
            data = b""
            if directory is not None:
                data, self.cursor = livelog.tail(directory, workdirs.LOG_TAIL_BYTES)
            self.started = True
            return [("log", {"reset": True, "html": self._html(data)})]
        if directory is None:
            return []
        if self.cursor is None:  # no log at the first poll: from the start of the one now
            self.cursor = livelog.start(directory)
            if self.cursor is None:
                return []
        data, self.cursor = livelog.follow(directory, self.cursor, LOG_CHUNK)
        html = self._html(data) if data else ""
        return [("log", {"reset": False, "html": html})] if html else []


@router.get("/events/q/{queue}/{msg_id:msgid}")
def message_events(
    request: Request, queue: str, msg_id: str, c: Console = Depends(console)
) -> StreamingResponse:
    env = request.app.state.templates
    base = views.base_context(c, request)
    follower = _LogFollower(c, queue, msg_id)
    # The page holds full URLs: streams reached under another host name sample apart.
    key = ("message", queue, msg_id, base_url(request, c.config))

    def build() -> Events:
        page = c.samples.get(key, lambda: views.message_page(c, request, queue, msg_id))
        context = {**base, **page}
        events: Events = [("fragments", views.fragments(env, views.MESSAGE_FRAGMENTS, context))]
        return events + follower.poll()

    return _response(request, build)


def _fragments_stream(
    request: Request,
    c: Console,
    names: dict[str, str],
    key: tuple[str, ...],
    context: Callable[[], dict[str, Any]],
) -> StreamingResponse:
    env = request.app.state.templates
    base = views.base_context(c, request)

    def build() -> Events:
        page = c.samples.get(key, context)
        return [("fragments", views.fragments(env, names, {**base, **page}))]

    return _response(request, build)


@router.get("/events/dead-letters")
def dead_letters_events(
    request: Request, search: str = Query("", max_length=200), c: Console = Depends(console)
) -> StreamingResponse:
    def context() -> dict[str, Any]:
        return {**pages_ops.dead_context(c, search), "search": search}

    return _fragments_stream(request, c, pages_ops.DEAD_FRAGMENTS, ("dead", search), context)


@router.get("/events/workers")
def workers_events(request: Request, c: Console = Depends(console)) -> StreamingResponse:
    return _fragments_stream(
        request, c, pages_ops.WORKERS_FRAGMENTS, ("workers",), lambda: pages_ops.workers_context(c)
    )


@router.get("/events/cluster")
def cluster_events(request: Request, c: Console = Depends(console)) -> StreamingResponse:
    return _fragments_stream(
        request, c, pages_ops.CLUSTER_FRAGMENTS, ("cluster",), lambda: pages_ops.cluster_context(c)
    )
