"""/api/v1: nodes (HELLO, INFO) and queues (QSCAN + QSTAT, QPEEK, PAUSE, purge, ADDJOB)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from conveyor.client import ConveyorError
from conveyor.web import schemas
from conveyor.web.console import Console, body_bytes, body_doc, check_name, console
from conveyor.web.gateway import ApiError, api_error_from
from conveyor.web.ids import QueueName
from conveyor.web.workdirs import counts, form_fields

PURGE_BATCH = 500
PURGE_MAX = 1_000_000  # jobs one purge deletes at most; call again for more

router = APIRouter()


@router.get("/nodes", response_model=schemas.NodeList, tags=["nodes"])
def list_nodes(c: Console = Depends(console)) -> dict[str, Any]:
    """Every node the console knows (configured, or learnt from HELLO): up or not, flags,
    INFO's main figures."""
    nodes = [{k: v for k, v in n.items() if k != "raw_info"} for n in c.sampler.snapshot().nodes]
    return {"nodes": nodes}


@router.get("/nodes/{address}/info", response_model=dict[str, Any], tags=["nodes"])
def node_info(
    address: str,
    section: str | None = Query(None, max_length=64, pattern=r"^[a-zA-Z]+$"),
    c: Console = Depends(console),
) -> dict[str, Any]:
    """The node's whole INFO (or one section) as a JSON object."""
    try:
        return c.gateway.node(address).info(section)
    except ConveyorError as exc:
        raise api_error_from(exc) from None


@router.get("/queues", response_model=schemas.QueueList, tags=["queues"])
def list_queues(
    minlen: int = Query(0, ge=0, le=schemas.MAX_INT),
    prefix: str = Query("", max_length=1024),
    c: Console = Depends(console),
) -> dict[str, Any]:
    """Every queue (on the nodes, or with a queue directory here), with QSTAT and rates."""
    snap = c.sampler.snapshot()
    if snap.error is not None and not snap.queues:
        raise ApiError(503, "node_unreachable", snap.error)
    queues = [
        q for q in snap.queues.values() if q["len"] >= minlen and q["name"].startswith(prefix)
    ]
    return {
        "queues": queues,
        "total": snap.queues_total,
        "rate_in": snap.rate_in,
        "rate_out": snap.rate_out,
    }


def queue_doc(c: Console, queue: str) -> dict[str, Any]:
    """One queue now (not from the cached snapshot: a page shows the effect of an action);
    404 when neither a node nor a queue directory knows it."""
    check_name(queue)
    try:
        doc = c.sampler.queue(queue)
    except ConveyorError as exc:
        raise api_error_from(exc) from None
    if not doc["exists"] and not doc["script_queue"]:
        raise ApiError(404, "no_queue", f"no queue {queue!r}")
    snap_queue = c.sampler.snapshot().queues.get(queue) or {}
    doc["rate_in"] = snap_queue.get("rate_in", 0.0)
    doc["rate_out"] = snap_queue.get("rate_out", 0.0)
    return doc


@router.get(
    "/queues/{queue}",
    response_model=schemas.Queue,
    tags=["queues"],
    responses={404: {"model": schemas.ErrorBody}},
)
def get_queue(queue: QueueName, c: Console = Depends(console)) -> dict[str, Any]:
    """QSTAT of one queue, its rates, and its messages on disk by state."""
    return queue_doc(c, queue)


@router.get("/queues/{queue}/jobs", response_model=schemas.JobList, tags=["queues"])
def peek(
    queue: QueueName,
    count: int = Query(10, ge=1, le=1000),
    newest: bool = False,
    c: Console = Depends(console),
) -> dict[str, Any]:
    """QPEEK: the next `count` jobs (the newest with `newest=true`), left queued."""
    check_name(queue)
    jobs = c.gateway.call("qpeek", queue, -count if newest else count)
    return {"jobs": [{"id": j.id, "queue": j.queue, **body_doc(j.body)} for j in jobs]}


@router.post(
    "/queues/{queue}/jobs", response_model=schemas.JobAdded, status_code=201, tags=["queues"]
)
def add_job(queue: QueueName, job: schemas.AddJob, c: Console = Depends(console)) -> dict[str, Any]:
    """ADDJOB: a raw job (any body). Script queues take messages: POST .../messages."""
    check_name(queue)
    known_queue(c, queue)
    options = {k: getattr(job, k) for k in ("delay", "retry", "ttl", "maxlen")}
    if options["ttl"] is not None and options["delay"] and options["delay"] >= options["ttl"]:
        raise ApiError(400, "bad_request", "delay must be shorter than ttl")
    body = body_bytes(job.body, job.body_encoding)
    job_id = c.gateway.call("add_job", queue, body, **options)
    return {"id": job_id, "queue": queue}


def known_queue(c: Console, queue: str) -> None:
    """Without `allow_new_queue`, jobs go only to queues the node or a directory knows."""
    if c.config.allow_new_queue or c.dirs.get(queue) is not None:
        return
    if c.gateway.call("qstat", queue) is None:
        raise ApiError(404, "no_queue", f"no queue {queue!r}; set allow_new_queue to create queues")


@router.post("/queues/{queue}/pause", response_model=schemas.PauseResult, tags=["queues"])
def pause(
    queue: QueueName, request: schemas.PauseRequest, c: Console = Depends(console)
) -> dict[str, Any]:
    """PAUSE in|out|all|none."""
    check_name(queue)
    state = c.gateway.call("pause", queue, request.state)
    return {"queue": queue, "pause": state}


@router.post("/queues/{queue}/purge", response_model=schemas.Count, tags=["queues"])
def purge(
    queue: QueueName, request: schemas.PurgeRequest | None = None, c: Console = Depends(console)
) -> dict[str, Any]:
    """Delete the queue's jobs (queued ones by default; `active`: delivered, not acked;
    `all`), in batches of DELJOB. Returns how many were deleted."""
    check_name(queue)
    state = request.state if request is not None else "queued"
    states = () if state == "all" else (state,)
    return {"count": purge_jobs(c, queue, states)}


def purge_jobs(c: Console, queue: str, states: tuple[str, ...]) -> int:
    deleted = 0
    batch: list[str] = []
    try:
        for index, job_id in enumerate(c.gateway.client.scan_jobs(queue, states, count=1000)):
            if index >= PURGE_MAX:
                break
            batch.append(job_id)
            if len(batch) >= PURGE_BATCH:
                deleted += c.gateway.client.del_job(*batch)
                batch.clear()
        if batch:
            deleted += c.gateway.client.del_job(*batch)
    except ConveyorError as exc:
        raise api_error_from(exc) from None
    return deleted


@router.get("/worker-queues", response_model=schemas.WorkerQueueList, tags=["messages"])
def worker_queues(c: Console = Depends(console)) -> dict[str, Any]:
    """The queue directories on this host (`--queues-dir`), and the ones that failed to load."""
    queues = []
    for name in c.dirs.names():
        config = c.dirs.get(name)
        if config is None:
            continue
        queues.append(
            {
                "name": name,
                "directory": str(config.directory),
                "script": config.script,
                "num_workers": config.num_workers,
                "messages": counts(config),
                "form": form_fields(config),
            }
        )
    return {"queues": queues, "errors": c.dirs.errors()}
