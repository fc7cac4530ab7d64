"""/api/v1: worker messages of the queue directories on this host, by state (que, run, done,
err, relayed): list with paging and search, one message with its status and log, enqueue,
re-run, move out of err, delete."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import PlainTextResponse

from conveyor.client import ConveyorError
from conveyor.web import livelog, schemas, workdirs
from conveyor.web.attachments import Stored
from conveyor.web.config import Principal
from conveyor.web.console import (
    Console,
    base_url,
    check_name,
    console,
    message_url,
    principal,
    show_doc,
)
from conveyor.web.gateway import ApiError, api_error_from
from conveyor.web.ids import MsgId, QueueName
from conveyor.worker.envelope import Attachment, Envelope
from conveyor.worker.queuedir import QueueConfig
from conveyor.worker.service import add_message
from conveyor.worker.webhooks import check_url

router = APIRouter(tags=["messages"])
MAX_LOG_READ = 4 * 1024 * 1024


def queue_config(c: Console, queue: str) -> QueueConfig:
    check_name(queue)
    config = c.dirs.get(queue)
    if config is None:
        raise ApiError(404, "no_queue_dir", f"no queue directory for {queue!r} on this console")
    return config


def attachment_url(request: Request, c: Console, aid: str) -> str:
    return base_url(request, c.config) + f"/attachments/{aid}"


def reference(request: Request, c: Console, stored: Stored) -> Attachment:
    """What the job carries for a stored file: name, MD5, size and where to fetch it."""
    url = attachment_url(request, c, stored.id)
    return Attachment(stored.name, b"", stored.md5, url, stored.size)


def stored_ref(request: Request, c: Console, aid: str, name: str | None) -> Attachment:
    """An attachment uploaded before (POST /api/v1/attachments) by its ID."""
    meta = c.attachment_store().meta(aid)
    if meta is None:
        raise ApiError(404, "no_attachment", f"no stored attachment {aid!r}")
    stored = Stored(aid, name or str(meta.get("name")), str(meta["md5"]), int(meta["size"]))
    return reference(request, c, stored)


def webhook_url(text: str | None) -> str:
    if not text:
        return ""
    try:
        return check_url(text)
    except ValueError as exc:
        raise ApiError(400, "bad_webhook", str(exc)) from None


def enqueue(
    c: Console, queue: str, params: dict[str, str], due: int, attachments: list[Attachment],
    webhook: str = "",
) -> str:  # fmt: skip
    """A new message on a script queue, exactly as `conveyor queue add` makes one."""
    config = queue_config(c, queue)
    envelope = Envelope({k: v for k, v in params.items() if v}, attachments, webhook=webhook)
    return add_envelope(c, config, envelope, due)


def add_envelope(c: Console, config: QueueConfig, envelope: Envelope, due: int) -> str:
    try:
        return add_message(c.gateway.client, config, envelope, due)
    except ConveyorError as exc:
        raise api_error_from(exc) from None


def rerun(c: Console, queue: str, msg_id: str, who: Principal) -> str:
    """A finished message enqueued again as a new one (`conveyor queue rerun`)."""
    config = queue_config(c, queue)
    found = workdirs.find(config, msg_id)
    if found is None:
        raise ApiError(404, "no_message", f"no message {msg_id!r} in {queue!r}")
    if found[0] not in workdirs.FINISHED:
        raise ApiError(409, "not_finished", f"the message is in {found[0]}; wait until it ends")
    raw = workdirs.envelope_json(config, msg_id)
    try:
        envelope = Envelope.from_json(raw or b"")
    except ValueError as exc:
        raise ApiError(409, "bad_message", f"msg.json cannot be re-run: {exc}") from None
    envelope.count = 0
    new_id = add_envelope(c, config, envelope, 0)
    workdirs.note_rerun(config, msg_id, new_id)
    return new_id


def detail(c: Console, request: Request, queue: str, msg_id: str) -> dict[str, Any]:
    config = queue_config(c, queue)
    doc = workdirs.message(config, msg_id)
    if doc is None:
        raise ApiError(404, "no_message", f"no message {msg_id!r} in {queue!r}")
    doc["queue"] = queue
    doc["url"] = message_url(request, c.config, queue, doc["id"])
    try:
        found = c.gateway.client.show(doc["id"])
    except Exception:  # the node's view is extra: the message on disk is still shown
        found = None
    doc["job"] = None if found is None else show_doc(found)
    return doc


@router.get("/queues/{queue}/messages", response_model=schemas.MessagePage)
def list_messages(
    queue: QueueName,
    state: schemas.STATE = "err",
    offset: int = Query(0, ge=0, le=workdirs.SCAN_LIMIT),
    limit: int = Query(50, ge=1, le=500),
    search: str = Query("", max_length=200),
    c: Console = Depends(console),
) -> dict[str, Any]:
    """One state's messages, newest first; `search` matches ID, status text and params."""
    return workdirs.list_messages(queue_config(c, queue), state, offset, limit, search)


@router.post("/queues/{queue}/messages", response_model=schemas.MessageAdded, status_code=201)
def add(
    queue: QueueName, message: schemas.NewMessage, request: Request, c: Console = Depends(console)
) -> dict[str, Any]:
    """Enqueue a message on a script queue: params, a due time, attachments (small ones as
    base64 `data`, any size as the `ref` of an upload to /attachments), a webhook."""
    queue_config(c, queue)  # 404 before anything is stored
    webhook = webhook_url(message.webhook)
    attachments = []
    for item in message.attachments:
        if isinstance(item, schemas.StoredRef):
            attachments.append(stored_ref(request, c, item.ref, item.name))
            continue
        try:
            data = base64.b64decode(item.data, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "bad_attachment", f"{item.name!r}: not base64") from None
        store = c.attachment_store()
        stored = store.save_bytes(item.name, data, c.config.max_attachment_bytes)
        attachments.append(reference(request, c, stored))
    params = {str(k): v for k, v in message.params.items()}
    msg_id = enqueue(c, queue, params, message.due, attachments, webhook)
    return {"id": msg_id, "queue": queue, "url": message_url(request, c.config, queue, msg_id)}


_LOG_ANSWER = {
    "description": "the log",
    "content": {"text/plain": {"schema": {"type": "string"}}},
    "headers": {
        "X-Log-Size": {
            "description": "the size of stdio.log now",
            "schema": {"type": "integer"},
        },
        "X-Log-Cursor": {
            "description": "where this read ended: give it back as `cursor` for what follows",
            "schema": {"type": "string", "pattern": f"^{livelog.CURSOR_RE}$"},
        },
    },
}


@router.get("/queues/{queue}/messages/{msg_id:msgid}/log", responses={200: _LOG_ANSWER})
def log(
    queue: QueueName,
    msg_id: MsgId,
    offset: int | None = Query(None, ge=-MAX_LOG_READ, le=livelog.MAX_OFFSET),
    cursor: str | None = Query(None, pattern=f"^{livelog.CURSOR_RE}$"),
    limit: int = Query(MAX_LOG_READ, ge=1, le=MAX_LOG_READ),
    c: Console = Depends(console),
) -> PlainTextResponse:
    """stdio.log from `offset` (negative: that many bytes from the end; 0 by default), or
    from `cursor`: the X-Log-Cursor of the answer before, which follows the worker's
    rotations of stdio.log (the rest of the old file, then each newer one from its start)
    where an offset cannot tell a new file from the old one (with a cursor, `offset` is not
    used). A character cut by `limit` or by a write in progress is left for the next read."""
    found = workdirs.find(queue_config(c, queue), msg_id)
    if found is None:
        raise ApiError(404, "no_message", f"no message {msg_id!r} in {queue!r}")
    directory = found[1]
    if cursor is None:
        data, size, after = livelog.read(directory, offset or 0, limit)
    else:
        try:
            start = livelog.decode(cursor)
        except ValueError as exc:
            raise ApiError(400, "bad_cursor", str(exc)) from None
        data, after = livelog.follow(directory, start, limit)
        size = livelog.size(directory)
    data, after = livelog.whole_chars(data, after)
    headers = {"X-Log-Size": str(size), "X-Log-Cursor": livelog.encode(after)}
    return PlainTextResponse(data.decode("utf-8", "replace"), headers=headers)


@router.post(
    "/queues/{queue}/messages/{msg_id:msgid}/rerun",
    response_model=schemas.MessageAdded,
    status_code=201,
)
def rerun_message(
    queue: QueueName, msg_id: MsgId, request: Request, c: Console = Depends(console)
) -> dict[str, Any]:
    """Enqueue a finished message (err, done, relayed) again as a new message."""
    new_id = rerun(c, queue, msg_id, principal(request))
    return {"id": new_id, "queue": queue, "url": message_url(request, c.config, queue, new_id)}


@router.post("/queues/{queue}/messages/{msg_id:msgid}/move", response_model=schemas.Moved)
def move_message(
    queue: QueueName,
    msg_id: MsgId,
    move: schemas.MoveMessage,
    request: Request,
    c: Console = Depends(console),
) -> dict[str, Any]:
    """Move a finished message to another finished state (out of err into done, say)."""
    config = queue_config(c, queue)
    who = principal(request).name
    try:
        state = workdirs.move(config, msg_id, move.to, f"moved to {move.to} by {who}")
    except LookupError:
        raise ApiError(404, "no_message", f"no message {msg_id!r} in {queue!r}") from None
    except ValueError as exc:
        raise ApiError(409, "not_finished", str(exc)) from None
    return {"id": msg_id, "state": state}


@router.get("/queues/{queue}/messages/{msg_id:msgid}", response_model=schemas.MessageDetail)
def get_message(
    queue: QueueName, msg_id: MsgId, request: Request, c: Console = Depends(console)
) -> dict[str, Any]:
    """One message: state, status text, params, attachments, and SHOW while the node has it."""
    return detail(c, request, queue, msg_id)


@router.delete("/queues/{queue}/messages/{msg_id:msgid}", response_model=schemas.Count)
def delete_message(
    queue: QueueName, msg_id: MsgId, c: Console = Depends(console)
) -> dict[str, Any]:
    """Remove a finished message's directory."""
    try:
        workdirs.delete(queue_config(c, queue), msg_id)
    except LookupError:
        raise ApiError(404, "no_message", f"no message {msg_id!r} in {queue!r}") from None
    except ValueError as exc:
        raise ApiError(409, "not_finished", str(exc)) from None
    return {"count": 1}
