"""/api/v1: messages in `err` across every queue directory (list, search, re-run one or all,
delete one or all), and a queue's schedules with their next run and "run now"."""

from __future__ import annotations

import threading
import time
from typing import Any

from fastapi import APIRouter, Depends, Path, Query, Request

from conveyor.web import schemas, workdirs
from conveyor.web.api_messages import add_envelope, queue_config, rerun
from conveyor.web.console import Console, console, message_url, principal
from conveyor.web.gateway import ApiError
from conveyor.web.ids import MAX_QUEUE_CHARS, QUEUE_RE, QueueName
from conveyor.worker.envelope import Envelope
from conveyor.worker.queuedir import QueueConfig

router = APIRouter()
BULK_MAX = 1000  # messages one "all" action touches; call again for more
# One console process serves the API (make run, `conveyor web`): a lock is enough to make
# bulk re-runs take turns.
_RERUNS = threading.Lock()


def _configs(c: Console, queue: str | None) -> list[QueueConfig]:
    if queue is not None:
        return [queue_config(c, queue)]
    return [cfg for name in c.dirs.names() if (cfg := c.dirs.get(name)) is not None]


def errors(c: Console, queue: str | None, search: str, offset: int, limit: int) -> dict[str, Any]:
    """A page of err messages, queue after queue. Each queue is asked only for the part of
    the page that falls in it; the rest it counts without reading a message's files (the
    dead-letters page asks for 50 every second, of maybe thousands)."""
    items: list[dict[str, Any]] = []
    total = 0
    for config in _configs(c, queue):
        start = max(0, offset - total)  # the page's first index within this queue
        wanted = max(0, offset + limit - max(offset, total))
        page = workdirs.list_messages(config, "err", start, wanted, search)
        items += [{**item, "queue": config.name} for item in page["items"]]
        total += page["total"]
    return {"total": total, "items": items}


@router.get("/errors", response_model=schemas.ErrorList, tags=["dead letters"])
def list_errors(
    queue: str | None = Query(
        None, min_length=1, max_length=MAX_QUEUE_CHARS, pattern=f"^{QUEUE_RE}$"
    ),
    search: str = Query("", max_length=200),
    offset: int = Query(0, ge=0, le=workdirs.SCAN_LIMIT),
    limit: int = Query(50, ge=1, le=500),
    c: Console = Depends(console),
) -> dict[str, Any]:
    """Messages in err on this host, newest first per queue; `search` matches ID, status
    text and params."""
    return errors(c, queue, search, offset, limit)


def _targets(c: Console, action: schemas.ErrorAction) -> list[tuple[QueueConfig, str]]:
    targets = []
    for config in _configs(c, action.queue):
        if action.ids is not None:
            targets += [(config, i) for i in action.ids if workdirs.find(config, i)]
            continue
        page = workdirs.list_messages(config, "err", 0, BULK_MAX)
        targets += [(config, item["id"]) for item in page["items"]]
    return targets[:BULK_MAX]


def rerun_errors(c: Console, action: schemas.ErrorAction, who: Any) -> int:
    """Each message re-run as a new one; the old one moves to done, so a second click
    never runs it twice. Bulk re-runs take turns (_RERUNS): two at once (a double
    click, two operators) would both find a message still in err and run it twice."""
    count = 0
    with _RERUNS:
        for config, msg_id in _targets(c, action):
            found = workdirs.find(config, msg_id)
            if found is None or found[0] != "err":
                continue
            new_id = rerun(c, config.name, msg_id, who)
            workdirs.move(config, msg_id, "done", f"re-run as {new_id} by {who.name}")
            count += 1
    return count


def delete_errors(c: Console, action: schemas.ErrorAction) -> int:
    count = 0
    for config, msg_id in _targets(c, action):
        found = workdirs.find(config, msg_id)
        if found is not None and found[0] == "err":
            workdirs.delete(config, msg_id)
            count += 1
    return count


@router.post("/errors/rerun", response_model=schemas.Count, tags=["dead letters"])
def rerun_error_messages(
    action: schemas.ErrorAction, request: Request, c: Console = Depends(console)
) -> dict[str, Any]:
    """Re-run messages in err (`ids`, or all of them, at most 1000) of one queue or all."""
    return {"count": rerun_errors(c, action, principal(request))}


@router.post("/errors/delete", response_model=schemas.Count, tags=["dead letters"])
def delete_error_messages(
    action: schemas.ErrorAction, c: Console = Depends(console)
) -> dict[str, Any]:
    """Delete messages in err (`ids`, or all of them, at most 1000) of one queue or all."""
    return {"count": delete_errors(c, action)}


def schedules(config: QueueConfig) -> list[dict[str, Any]]:
    from conveyor.worker.cron import ticks_between

    now = time.time()
    found = []
    for index, entry in enumerate(config.schedule):
        # The next tick: within the next minute or hour (cheap: few ticks to walk), else
        # within a year (a daily or yearly schedule).
        ticks: list[int] = []
        for window in (60, 3600, 366 * 86400):
            try:
                ticks = ticks_between(entry.cron, now, now + window)[:1]
            except ValueError:  # no date ever matches (Feb 30): no next run to show
                break
            if ticks:
                break
        found.append(
            {
                "index": index,
                "cron": entry.cron,
                "params": dict(entry.params),
                "next_run": float(ticks[0]) if ticks else None,
            }
        )
    return found


@router.get("/queues/{queue}/schedules", response_model=schemas.ScheduleList, tags=["messages"])
def list_schedules(queue: QueueName, c: Console = Depends(console)) -> dict[str, Any]:
    """The queue's cron schedules (config.json `schedule`) with their next run (UTC)."""
    return {"queue": queue, "schedules": schedules(queue_config(c, queue))}


def run_now(c: Console, queue: str, index: int) -> str:
    config = queue_config(c, queue)
    if not 0 <= index < len(config.schedule):
        raise ApiError(404, "no_schedule", f"{queue!r} has no schedule #{index}")
    entry = config.schedule[index]
    envelope = Envelope(params=dict(entry.params), origin="schedule (run now)")
    return add_envelope(c, config, envelope, 0)


@router.post(
    "/queues/{queue}/schedules/{index}/run",
    response_model=schemas.MessageAdded,
    status_code=201,
    tags=["messages"],
)
def run_schedule_now(
    queue: QueueName,
    request: Request,
    index: int = Path(ge=0, le=1000),
    c: Console = Depends(console),
) -> dict[str, Any]:
    """Enqueue the schedule's message now, outside its ticks (a paused queue: 409)."""
    msg_id = run_now(c, queue, index)
    return {"id": msg_id, "queue": queue, "url": message_url(request, c.config, queue, msg_id)}
