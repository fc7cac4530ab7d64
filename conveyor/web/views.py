"""What the pages show, as template contexts, and the page fragments the live streams send.

A page is rendered whole once; after that its stream sends the same partial templates
(`_*.html`) re-rendered, so the live view and the first view can never disagree.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fastapi import Request
from jinja2 import Environment, FileSystemLoader, select_autoescape

from conveyor.client import ConveyorError
from conveyor.web import ansi, api_errors, api_messages, workdirs
from conveyor.web.api_queues import queue_doc
from conveyor.web.console import Console, body_doc, message_path, principal
from conveyor.web.gateway import ApiError
from conveyor.web.security import csrf_token

TEMPLATES = Path(__file__).parent / "templates"
PEEK = 10
PAGE = 25

OVERVIEW_FRAGMENTS = {"nodes": "_nodes.html", "queues": "_queues.html", "chart": "_chart.html"}
QUEUE_FRAGMENTS = {
    "qstat": "_qstat.html",
    "peek": "_peek.html",
    "messages": "_messages.html",
    "schedules": "_schedules.html",
}
MESSAGE_FRAGMENTS = {"msg-status": "_msg_status.html", "msg-job": "_msg_job.html"}


def make_environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["rate"] = lambda value: f"{value:.1f}" if value else "0"
    env.globals["message_path"] = message_path
    return env


def _when(epoch: float | None) -> str:
    """A time as UTC text. Absolute, not "5s ago": a fragment then changes only when its
    data does, and live streams send nothing for a quiet list."""
    if not epoch:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch))


def base_context(c: Console, request: Request) -> dict[str, Any]:
    who = principal(request)
    return {
        "request": request,
        "root": request.scope.get("root_path", ""),
        "user": who,
        "can_write": who.can_write,
        "csrf": csrf_token(c.config, who),
        "env": c.config.env,
    }


def overview(c: Console) -> dict[str, Any]:
    snap = c.sampler.snapshot()
    return {
        "snap": snap,
        "nodes": [n for n in snap.nodes],
        "queues": sorted(snap.queues.values(), key=lambda q: q["name"]),
        "offline": snap.offline,
        "totals": snap.totals(),
        "chart": chart(list(c.sampler.history)),
    }


def chart(history: list[tuple[float, float, float]]) -> dict[str, Any]:
    """Jobs in/out per second as SVG polyline points, scaled to a 300x60 box."""
    width, height = 300, 60
    peak = max([1.0, *[max(r_in, r_out) for _, r_in, r_out in history]])
    step = width / max(1, len(history) - 1)

    def points(index: int) -> str:
        return " ".join(
            f"{i * step:.1f},{height - (sample[index] / peak) * (height - 2):.1f}"
            for i, sample in enumerate(history)
        )

    last = history[-1] if history else (0.0, 0.0, 0.0)
    return {
        "points_in": points(1),
        "points_out": points(2),
        "peak": peak,
        "rate_in": last[1],
        "rate_out": last[2],
        "width": width,
        "height": height,
    }


def queue_page(c: Console, queue: str, state: str, offset: int, search: str) -> dict[str, Any]:
    try:
        doc = queue_doc(c, queue)
    except ApiError as exc:
        doc = _queue_from_disk(c, queue, exc)
    try:
        peek = [{"id": j.id, **body_doc(j.body)} for j in c.gateway.client.qpeek(queue, PEEK)]
    except ConveyorError:
        peek = []
    config = c.dirs.get(queue)
    messages = None
    form: list[dict[str, str]] = []
    schedules: list[dict[str, Any]] = []
    if config is not None:
        messages = workdirs.list_messages(config, state, offset, PAGE, search)
        form = workdirs.form_fields(config)
        schedules = api_errors.schedules(config)
    return {
        "queue": doc,
        "peek": peek,
        "messages": messages,
        "form": form,
        "state": state,
        "offset": offset,
        "search": search,
        "page": PAGE,
        "states": workdirs.STATES,
        "schedules": schedules,
    }


def _queue_from_disk(c: Console, queue: str, error: ApiError) -> dict[str, Any]:
    """A queue directory's page while no node answers: its messages are on this host's
    disk, and the overview links to them; the node's figures are unknown."""
    config = c.dirs.get(queue)
    if error.code != "node_unreachable" or config is None:
        raise error
    return {
        "name": queue,
        "exists": False,
        "unreachable": error.message,
        "script_queue": True,
        "messages": workdirs.counts(config),
        "workers": config.num_workers,
    }


def message_page(c: Console, request: Request, queue: str, msg_id: str) -> dict[str, Any]:
    msg = api_messages.detail(c, request, queue, msg_id)
    return {"msg": msg, "queue_name": queue}


def log_tail(c: Console, queue: str, msg_id: str) -> tuple[str, int]:
    """The log's last LOG_TAIL_BYTES as text and the log's size."""
    config = c.dirs.get(queue)
    if config is None:
        raise ApiError(404, "no_queue_dir", f"no queue directory for {queue!r}")
    data, size = workdirs.read_log(
        config, msg_id, -workdirs.LOG_TAIL_BYTES, workdirs.LOG_TAIL_BYTES
    )
    return data.decode("utf-8", "replace"), max(0, size)


def render_log(text: str) -> str:
    return ansi.render(text)


def fragments(env: Environment, names: dict[str, str], context: dict[str, Any]) -> dict[str, str]:
    return {key: env.get_template(name).render(context) for key, name in names.items()}
