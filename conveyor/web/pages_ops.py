"""The operator pages beyond queues and messages: dead letters and errors, workers, the
cluster; and the form actions behind their buttons (and the queue page's "run now").

Like conveyor.web.pages: a page is rendered once and kept live by its stream (the same
partial templates), and forms post here with their CSRF field and are answered with a
redirect, or JSON when the page's script sent them.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from conveyor.web import api_errors, api_jobs, api_ops, schemas
from conveyor.web.console import Console, check_name, console, message_path, principal
from conveyor.web.gateway import ApiError
from conveyor.web.pages import answer, render

router = APIRouter(include_in_schema=False)
DEAD_FRAGMENTS = {"dead": "_dead.html", "errors": "_errors.html"}
WORKERS_FRAGMENTS = {"workers": "_workers.html"}
CLUSTER_FRAGMENTS = {"cluster": "_cluster.html"}
PAGE = 50


def dead_context(c: Console, search: str) -> dict[str, Any]:
    dead = api_jobs.dead_letters(count=100, search=search, c=c)
    found = api_errors.errors(c, None, search, 0, PAGE)
    return {"dead": dead, "errors": found["items"], "errors_total": found["total"]}


def workers_context(c: Console) -> dict[str, Any]:
    return {"workers": api_ops.workers(c)}


def cluster_context(c: Console) -> dict[str, Any]:
    return {"cluster": api_ops.cluster(c)}


@router.get("/dead-letters", response_class=HTMLResponse)
def dead_letters_page(
    request: Request, search: str = Query("", max_length=200), c: Console = Depends(console)
) -> HTMLResponse:
    stream = "/events/dead-letters" + (f"?{request.url.query}" if request.url.query else "")
    context = {**dead_context(c, search), "search": search, "stream": stream}
    return render(request, "dead.html", context)


@router.get("/workers", response_class=HTMLResponse)
def workers_page(request: Request, c: Console = Depends(console)) -> HTMLResponse:
    return render(request, "workers.html", {**workers_context(c), "stream": "/events/workers"})


@router.get("/cluster", response_class=HTMLResponse)
def cluster_page(request: Request, c: Console = Depends(console)) -> HTMLResponse:
    return render(request, "cluster.html", {**cluster_context(c), "stream": "/events/cluster"})


# -- form actions ---------------------------------------------------------------------------


@router.post("/dead-letters/act")
def dead_letters_action(
    request: Request,
    action: Literal["requeue", "delete"] = Form(...),
    id: str | None = Form(None, max_length=64),
    queue: str | None = Form(None, max_length=1024),
    c: Console = Depends(console),
) -> Response:
    """One dead letter (`id`) or all of them (no `id`): requeue into `queue`, or delete."""
    try:
        body = schemas.DeadLetterAction(ids=[id] if id else None, queue=queue or None)
    except ValidationError:
        raise ApiError(400, "bad_request", "not a job ID or queue name") from None
    if action == "requeue":
        count = api_jobs.requeue_dead_letters(body, c)["count"]
    else:
        count = api_jobs.delete_dead_letters(body, c)["count"]
    return answer(request, f"{action}: {count} dead letter(s)", "/dead-letters", count=count)


@router.post("/errors/act")
def errors_action(
    request: Request,
    action: Literal["rerun", "delete"] = Form(...),
    queue: str | None = Form(None, max_length=1024),
    id: str | None = Form(None, max_length=64),
    c: Console = Depends(console),
) -> Response:
    """One message in err (`queue` + `id`) or all of them (of `queue`, or every queue)."""
    try:
        body = schemas.ErrorAction(queue=queue or None, ids=[id] if id else None)
    except ValidationError:
        raise ApiError(400, "bad_request", "not a queue name or message ID") from None
    if action == "rerun":
        count = api_errors.rerun_errors(c, body, principal(request))
    else:
        count = api_errors.delete_errors(c, body)
    return answer(request, f"{action}: {count} message(s)", "/dead-letters", count=count)


@router.post("/workers/{wid}/{word}")
def worker_action(
    request: Request, wid: str, word: Literal["quiet", "stop"], c: Console = Depends(console)
) -> Response:
    api_ops.control(c, wid, word)
    return answer(request, f"asked {wid} to {word}", "/workers")


@router.post("/q/{queue}/schedules/{index}/run")
def run_schedule_action(
    request: Request, queue: str, index: int, c: Console = Depends(console)
) -> Response:
    check_name(queue)
    msg_id = api_errors.run_now(c, queue, index)
    path = message_path(queue, msg_id)
    url = request.scope.get("root_path", "") + path
    return answer(request, f"enqueued {msg_id}", path, id=msg_id, url=url)
