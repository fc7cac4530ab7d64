"""The HTML pages and the form actions behind their buttons.

Forms post here (with their CSRF field) and are answered with a redirect back (303), or with
JSON when the page's script sent them (`Accept: application/json`): then the page stays
where it is and its live stream shows the result.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from conveyor.web import api_jobs, api_messages, api_queues, views, workdirs
from conveyor.web.console import Console, check_name, console, message_path, principal
from conveyor.web.gateway import ApiError
from conveyor.web.rq_routes import wants_json
from conveyor.web.schemas import MAX_INT

router = APIRouter(include_in_schema=False)
STATE = Literal["que", "run", "done", "err", "relayed"]


def render(request: Request, template: str, context: dict[str, Any]) -> HTMLResponse:
    c: Console = request.app.state.console
    env = request.app.state.templates
    page = env.get_template(template).render({**views.base_context(c, request), **context})
    return HTMLResponse(page)


def answer(request: Request, message: str, location: str, **extra: Any) -> Response:
    root = request.scope.get("root_path", "")
    if wants_json(request):
        if "redirect" in extra:
            extra["redirect"] = root + extra["redirect"]
        return JSONResponse({"ok": True, "message": message, **extra})
    return RedirectResponse(root + location, status_code=303)


def _queue_path(queue: str) -> str:
    return message_path(queue, "x").rsplit("/", 1)[0]


@router.get("/", response_class=HTMLResponse)
def overview_page(request: Request, c: Console = Depends(console)) -> HTMLResponse:
    return render(request, "overview.html", {**views.overview(c), "stream": "/events/overview"})


@router.get("/q/{queue}", response_class=HTMLResponse)
def queue_page(
    request: Request,
    queue: str,
    state: STATE = "err",
    offset: int = Query(0, ge=0, le=workdirs.SCAN_LIMIT),
    search: str = Query("", max_length=200),
    c: Console = Depends(console),
) -> HTMLResponse:
    context = views.queue_page(c, queue, state, offset, search)
    stream = f"/events{_queue_path(queue)}?{request.url.query}".rstrip("?")
    return render(request, "queue.html", {**context, "stream": stream})


@router.get("/q/{queue}/{msg_id:msgid}", response_class=HTMLResponse)
def message_page(
    request: Request, queue: str, msg_id: str, c: Console = Depends(console)
) -> HTMLResponse:
    context = views.message_page(c, request, queue, msg_id)
    text, _size = views.log_tail(c, queue, msg_id)
    stream = f"/events{message_path(queue, msg_id)}"
    return render(
        request, "message.html", {**context, "log_html": views.render_log(text), "stream": stream}
    )


@router.get("/jobs/{job_id:jobid}", response_class=HTMLResponse)
def job_page(request: Request, job_id: str, c: Console = Depends(console)) -> HTMLResponse:
    job = api_jobs.show(c, job_id)
    if job is None:
        raise ApiError(404, "no_job", f"no job {job_id!r} on the node (acked or deleted?)")
    return render(request, "job.html", {"job": job, "stream": ""})


# -- form actions ---------------------------------------------------------------------------


@router.post("/q/{queue}/pause")
def pause_action(
    request: Request,
    queue: str,
    state: Literal["in", "out", "all", "none"] = Form(...),
    c: Console = Depends(console),
) -> Response:
    check_name(queue)
    result = c.gateway.call("pause", queue, state)
    return answer(request, f"{queue}: pause {result}", _queue_path(queue), pause=result)


@router.post("/q/{queue}/purge")
def purge_action(request: Request, queue: str, c: Console = Depends(console)) -> Response:
    check_name(queue)
    count = api_queues.purge_jobs(c, queue, ("queued",))
    return answer(request, f"{queue}: {count} queued jobs deleted", _queue_path(queue))


@router.post("/q/{queue}/add_job")
def add_job_action(
    request: Request,
    queue: str,
    body: str = Form(..., max_length=8 * 1024 * 1024),
    delay: int = Form(0, ge=0, le=MAX_INT),
    c: Console = Depends(console),
) -> Response:
    check_name(queue)
    api_queues.known_queue(c, queue)
    job_id = c.gateway.call("add_job", queue, body.encode(), delay=delay or None)
    return answer(request, f"added job {job_id}", _queue_path(queue), id=job_id)


@router.post("/q/{queue}/{msg_id:msgid}/rerun")
def rerun_action(
    request: Request, queue: str, msg_id: str, c: Console = Depends(console)
) -> Response:
    new_id = api_messages.rerun(c, queue, msg_id, principal(request))
    path = message_path(queue, new_id)
    return answer(
        request,
        f"re-run as {new_id}",
        path,
        id=new_id,
        url=request.scope.get("root_path", "") + path,
    )


@router.post("/q/{queue}/{msg_id:msgid}/move")
def move_action(
    request: Request,
    queue: str,
    msg_id: str,
    to: Literal["done", "err", "relayed"] = Form(...),
    c: Console = Depends(console),
) -> Response:
    config = api_messages.queue_config(c, queue)
    try:
        workdirs.move(config, msg_id, to, f"moved to {to} by {principal(request).name}")
    except LookupError:
        raise ApiError(404, "no_message", f"no message {msg_id!r}") from None
    except ValueError as exc:
        raise ApiError(409, "not_finished", str(exc)) from None
    return answer(request, f"moved to {to}", message_path(queue, msg_id))


@router.post("/q/{queue}/{msg_id:msgid}/delete")
def delete_action(
    request: Request, queue: str, msg_id: str, c: Console = Depends(console)
) -> Response:
    config = api_messages.queue_config(c, queue)
    try:
        workdirs.delete(config, msg_id)
    except LookupError:
        raise ApiError(404, "no_message", f"no message {msg_id!r}") from None
    except ValueError as exc:
        raise ApiError(409, "not_finished", str(exc)) from None
    return answer(request, "deleted", _queue_path(queue), redirect=_queue_path(queue))


@router.post("/jobs/{job_id:jobid}/act")
def job_action(
    request: Request,
    job_id: str,
    action: Literal["ack", "nack", "enqueue", "dequeue", "delete"] = Form(...),
    delay: int = Form(0, ge=0, le=MAX_INT),
    c: Console = Depends(console),
) -> Response:
    job_id = api_jobs.check_id(job_id)
    if action == "nack":
        count = c.gateway.call("nack", job_id, delay=delay or None)
    else:
        method = {"delete": "del_job"}.get(action, action)
        count = c.gateway.call(method, job_id)
    return answer(request, f"{action}: {count} job(s)", f"/jobs/{job_id}")
