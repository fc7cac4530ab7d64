"""/api/v1: one job (SHOW, ACKJOB, NACK, ENQUEUE, DEQUEUE, DELJOB) and the dead letters.

Job IDs may contain '/': routes match them with the `jobid` convertor (conveyor.web.ids),
so `/jobs/D-.../ack` works with the slash written as is or as %2F.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query

from conveyor.client import ConveyorError
from conveyor.web import schemas
from conveyor.web.api_queues import known_queue
from conveyor.web.console import Console, body_doc, check_name, console, show_doc
from conveyor.web.gateway import ApiError, api_error_from
from conveyor.web.ids import JOB_ID_RE, JobId

router = APIRouter(tags=["jobs"])
DEAD_LETTER_PEEK = 1000
_ACTIONS = {"ack": "ack", "enqueue": "enqueue", "dequeue": "dequeue"}


def check_id(job_id: str) -> str:
    if not re.fullmatch(JOB_ID_RE, job_id):
        raise ApiError(400, "bad_id", f"not a job ID: {job_id[:80]!r}")
    return job_id


def show(c: Console, job_id: str) -> dict[str, Any] | None:
    found = c.gateway.call("show", check_id(job_id))
    return None if found is None else show_doc(found)


@router.get(
    "/jobs/{job_id:jobid}",
    response_model=schemas.JobDetail,
    responses={404: {"model": schemas.ErrorBody}},
)
def get_job(job_id: JobId, c: Console = Depends(console)) -> dict[str, Any]:
    """SHOW: every field of the job; 404 when the node does not know it."""
    found = show(c, job_id)
    if found is None:
        raise ApiError(404, "no_job", f"no job {job_id!r}")
    return found


@router.delete("/jobs/{job_id:jobid}", response_model=schemas.Count)
def delete_job(job_id: JobId, c: Console = Depends(console)) -> dict[str, Any]:
    """DELJOB: 1 if the job was deleted, 0 if it was unknown."""
    return {"count": c.gateway.call("del_job", check_id(job_id))}


@router.post("/jobs/{job_id:jobid}/nack", response_model=schemas.Count)
def nack(
    job_id: JobId, request: schemas.Nack | None = None, c: Console = Depends(console)
) -> dict[str, Any]:
    """NACK: put the job back in its queue now, or after `delay` seconds (counts a nack)."""
    return {
        "count": c.gateway.call("nack", check_id(job_id), delay=request.delay if request else None)
    }


@router.post("/jobs/{job_id:jobid}/{action}", response_model=schemas.Count)
def job_action(
    job_id: JobId, action: Literal["ack", "enqueue", "dequeue"], c: Console = Depends(console)
) -> dict[str, Any]:
    """`ack` (ACKJOB), `enqueue` (ENQUEUE: queue it again) or `dequeue` (DEQUEUE). The
    count is how many jobs the node changed (0: unknown job or nothing to do)."""
    return {"count": c.gateway.call(_ACTIONS[action], check_id(job_id))}


def _dead_letter_config(c: Console) -> tuple[str | None, int | None]:
    """The node's deadletter-queue and max-deliveries (CONFIG GET through the client)."""
    queue = _config_get(c, "deadletter-queue") or None
    limit = _config_get(c, "max-deliveries")
    return queue, int(limit) if limit.isdigit() and int(limit) > 0 else None


def _config_get(c: Console, name: str) -> str:
    try:
        reply = c.gateway.client.execute_command("CONFIG", "GET", name)
    except ConveyorError as exc:
        raise api_error_from(exc) from None
    # A map in RESP3, a flat [name, value] array in RESP2.
    if isinstance(reply, dict):
        pairs = list(reply.items())
    else:
        pairs = [(reply[i], reply[i + 1]) for i in range(0, len(reply or []) - 1, 2)]
    return next((_text(v) for k, v in pairs if _text(k) == name), "")


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


@router.get("/dead-letters", response_model=schemas.DeadLetters, tags=["dead letters"])
def dead_letters(
    count: int = Query(100, ge=1, le=DEAD_LETTER_PEEK),
    search: str = Query("", max_length=200),
    c: Console = Depends(console),
) -> dict[str, Any]:
    """The dead-letter queue (config `deadletter-queue`): its length and oldest jobs;
    `search` keeps those whose ID or body contains it (among the oldest 1000)."""
    queue, limit = _dead_letter_config(c)
    if queue is None:
        return {"queue": None, "max_deliveries": limit, "length": 0, "jobs": []}
    needle = search.strip().lower()
    jobs = c.gateway.call("qpeek", queue, DEAD_LETTER_PEEK if needle else count)
    if needle:
        found = [j for j in jobs if needle in f"{j.id} {_text(j.body)}".lower()]
        jobs = found[:count]
    return {
        "queue": queue,
        "max_deliveries": limit,
        "length": c.gateway.call("qlen", queue),
        "jobs": [{"id": j.id, "queue": j.queue, **body_doc(j.body)} for j in jobs],
    }


def _dead_ids(c: Console, queue: str, ids: list[str] | None) -> list[str]:
    if ids is not None:
        return [check_id(i) for i in ids]
    return [j.id for j in c.gateway.call("qpeek", queue, DEAD_LETTER_PEEK)]


@router.post("/dead-letters/requeue", response_model=schemas.Count, tags=["dead letters"])
def requeue_dead_letters(
    request: schemas.DeadLetterAction, c: Console = Depends(console)
) -> dict[str, Any]:
    """Move dead letters (`ids`, or the oldest 1000) to `queue` as new jobs (same body;
    the node does not remember a dead letter's first queue), deleting the originals."""
    dead_queue, _ = _dead_letter_config(c)
    if dead_queue is None:
        raise ApiError(409, "no_dead_letter_queue", "the node has no deadletter-queue set")
    if not request.queue:
        raise ApiError(400, "bad_request", "give the queue to requeue into")
    target = check_name(request.queue)
    # A typo would otherwise make a queue nobody consumes and empty the dead letters into it.
    known_queue(c, target)
    moved = 0
    for job_id in _dead_ids(c, dead_queue, request.ids):
        found = c.gateway.call("show", job_id)
        if found is None or found.get("queue") != dead_queue:
            continue  # gone meanwhile, or not a dead letter: never move other jobs
        c.gateway.call("add_job", target, found.get("body") or b"")
        moved += c.gateway.call("del_job", job_id)
    return {"count": moved}


@router.post("/dead-letters/delete", response_model=schemas.Count, tags=["dead letters"])
def delete_dead_letters(
    request: schemas.DeadLetterAction, c: Console = Depends(console)
) -> dict[str, Any]:
    """Delete dead letters (`ids`, or the oldest 1000)."""
    dead_queue, _ = _dead_letter_config(c)
    if dead_queue is None:
        raise ApiError(409, "no_dead_letter_queue", "the node has no deadletter-queue set")
    deleted = 0
    for job_id in _dead_ids(c, dead_queue, request.ids):
        found = c.gateway.call("show", job_id)
        if found is not None and found.get("queue") == dead_queue:
            deleted += c.gateway.call("del_job", job_id)
    return {"count": deleted}
