"""Attachments: `POST /api/v1/attachments` streams a file of any size (up to
`max_attachment_mb`) to the console's disk; `GET /attachments/<id>` is where workers fetch
it. See conveyor.web.attachments for the store and why the ID is the credential."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse
from pydantic import AfterValidator
from starlette.concurrency import run_in_threadpool

from conveyor.web import schemas
from conveyor.web.api_messages import attachment_url
from conveyor.web.attachments import MAX_NAME_BYTES, NAME_RE, check_name, fits, save_stream
from conveyor.web.console import Console, console
from conveyor.web.gateway import ApiError

router = APIRouter(tags=["attachments"])
files = APIRouter(include_in_schema=False)

_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.post(
    "/attachments",
    response_model=schemas.StoredAttachment,
    status_code=201,
    openapi_extra=_BODY,
)
async def upload(
    request: Request,
    name: Annotated[
        str,
        Query(
            pattern=f"^{NAME_RE}$",
            description=f"the file name scripts see, at most {MAX_NAME_BYTES} bytes in UTF-8",
        ),
        AfterValidator(fits),
    ],
    c: Console = Depends(console),
) -> dict[str, Any]:
    """Store the raw request body (streamed to disk, MD5 computed on the way). Put the
    answer's `id` as `ref` in a message's attachments (POST .../messages)."""
    check_name(name)
    length = request.headers.get("content-length", "")
    # A client that sends a file says what it is; one that sends no body says nothing (and
    # an empty body is otherwise an empty file).
    if "content-type" not in request.headers:
        raise ApiError(400, "no_body", "send the file as the body, with a Content-Type")
    if length.isdigit() and int(length) > c.config.max_attachment_bytes:
        raise ApiError(413, "too_large", f"over {c.config.max_attachment_bytes} bytes")
    store = c.attachment_store()
    if length.isdigit():
        # Refused before the client sends it all. Off the event loop: expired files may be
        # removed first.
        await run_in_threadpool(store.room, int(length))
    stored = await save_stream(store, name, request.stream(), c.config.max_attachment_bytes)
    return {
        "id": stored.id,
        "name": stored.name,
        "md5": stored.md5,
        "size": stored.size,
        "url": attachment_url(request, c, stored.id),
    }


@files.get("/attachments/{aid}")
def download(aid: str, c: Console = Depends(console)) -> FileResponse:
    """The file, streamed from disk, with its MD5 in `Content-MD5`-style `X-MD5`."""
    store = c.attachment_store()
    path, meta = store.path(aid), store.meta(aid)
    if path is None or meta is None:
        raise ApiError(404, "no_attachment", "no such attachment (removed, or a wrong id)")
    return FileResponse(
        path,
        media_type="application/octet-stream",
        filename=str(meta.get("name", aid)),
        headers={"X-MD5": str(meta.get("md5", ""))},
    )
