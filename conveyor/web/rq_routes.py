"""Seed 004's message routes, so RQ-style clients work unchanged:

POST /q/<queue>/new_message       form fields param1..param4 (or RQ's mesg_param1..4),
                                  due (mesg_due), webhook, files as attachments (stored
                                  on disk, see conveyor.web.attachments), or `mesg` = a
                                  JSON object of the same; x_format=json answers
                                  ["ok", "<full message URL>"], otherwise 303 to it
GET  /q/<queue>/<msg id>.json     the message's status as JSON
GET  /q/<queue>/<msg id>/log      stdio.log (also .../log/stdio.log)
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from conveyor.web import api_messages, workdirs
from conveyor.web.console import Console, console, message_path, message_url
from conveyor.web.gateway import ApiError
from conveyor.web.schemas import MAX_INT
from conveyor.worker.envelope import Attachment

router = APIRouter(include_in_schema=False)
MAX_LOG = 16 * 1024 * 1024


def _fields(form: Any) -> dict[str, str]:
    """RQ's field names and Conveyor's, and a `mesg` JSON object, as one dict."""
    fields: dict[str, str] = {}
    raw = form.get("mesg")
    if isinstance(raw, str) and raw.strip():
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the stack
            raise ApiError(400, "bad_request", "'mesg' is not a JSON object") from None
        if not isinstance(doc, dict):
            raise ApiError(400, "bad_request", "'mesg' is not a JSON object")
        fields.update({str(k).removeprefix("mesg_"): str(v) for k, v in doc.items()})
    for key, value in form.multi_items():
        if isinstance(value, str):
            fields[key.removeprefix("mesg_")] = value
    return fields


def _params(fields: dict[str, str]) -> dict[str, str]:
    params = {f"param{n}": fields.get(f"param{n}", "") for n in range(1, 5)}
    for key, value in params.items():
        if "\x00" in value:  # scripts get params as env vars, which cannot hold one
            raise ApiError(400, "bad_request", f"{key} cannot hold a NUL byte")
    return params


def _due(text: str) -> int:
    try:
        due = int(text or 0)
    except ValueError:
        raise ApiError(
            400, "bad_request", f"due must be whole seconds, not {text[:40]!r}"
        ) from None
    if not 0 <= due <= MAX_INT:
        raise ApiError(400, "bad_request", f"due must be in 0..{MAX_INT}")
    return due


async def _attachments(request: Request, c: Console, form: Any) -> list[Attachment]:
    """The form's files, copied in chunks from the parser's spooled files into the store."""
    files = [v for _k, v in form.multi_items() if isinstance(v, UploadFile) and v.filename]
    if len(files) > 16:
        raise ApiError(400, "bad_attachment", "at most 16 attachments")
    found = []
    for upload in files:
        store = c.attachment_store()
        limit = c.config.max_attachment_bytes
        stored = await run_in_threadpool(store.save_file, upload.filename, upload.file, limit)
        found.append(api_messages.reference(request, c, stored))
    return found


def wants_json(request: Request, fields: dict[str, str] | None = None) -> bool:
    if fields is not None and fields.get("x_format") == "json":
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


@router.post("/q/{queue}/new_message")
async def new_message(request: Request, queue: str, c: Console = Depends(console)) -> Response:
    try:
        form = await request.form(max_files=17, max_fields=64)
    except Exception:  # a malformed body: say so instead of a traceback
        raise ApiError(400, "bad_form", "the body is not a valid form") from None
    try:
        fields = _fields(form)
        params = _params(fields)
        due = _due(fields.get("due", ""))
        webhook = api_messages.webhook_url(fields.get("webhook"))
        await run_in_threadpool(api_messages.queue_config, c, queue)  # 404 before storing
        attachments = await _attachments(request, c, form)
    finally:
        await form.close()
    msg_id = await run_in_threadpool(
        api_messages.enqueue, c, queue, params, due, attachments, webhook
    )
    url = message_url(request, c.config, queue, msg_id)
    if fields.get("x_format") == "json":
        return JSONResponse(["ok", url])
    if wants_json(request):
        return JSONResponse({"ok": True, "id": msg_id, "url": url, "message": f"enqueued {msg_id}"})
    root = request.scope.get("root_path", "")
    return RedirectResponse(root + message_path(queue, msg_id), status_code=303)


@router.get("/q/{queue}/{msg_id:msgid}.json")
def message_json(
    request: Request, queue: str, msg_id: str, c: Console = Depends(console)
) -> dict[str, Any]:
    doc = api_messages.detail(c, request, queue, msg_id)
    return {k: v for k, v in doc.items() if k != "job"} | {"on_node": doc["job"] is not None}


@router.get("/q/{queue}/{msg_id:msgid}/log")
@router.get("/q/{queue}/{msg_id:msgid}/log/stdio.log")
def message_log(queue: str, msg_id: str, c: Console = Depends(console)) -> PlainTextResponse:
    config = api_messages.queue_config(c, queue)
    data, size = workdirs.read_log(config, msg_id, -MAX_LOG, MAX_LOG)
    if size < 0:
        raise ApiError(404, "no_message", f"no message {msg_id!r} in {queue!r}")
    return PlainTextResponse(data.decode("utf-8", "replace"), headers={"X-Log-Size": str(size)})
