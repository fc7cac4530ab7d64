"""/api/v1: the worker processes (from the records they keep in the queue directories, see
conveyor.worker.registry) with quiet/stop, and the cluster as HELLO and INFO show it."""

from __future__ import annotations

import re
import time
from typing import Any, Literal

from fastapi import APIRouter, Depends, Path

from conveyor.web import schemas
from conveyor.web.console import Console, console
from conveyor.web.gateway import ApiError
from conveyor.worker import registry

router = APIRouter()
LOST_AFTER_S = 10.0  # a record not refreshed for this long: the worker died or hangs
WORKER_ID_RE = r"[A-Za-z0-9._-]{1,200}-[0-9]{1,10}"
WorkerId = Path(pattern=f"^{WORKER_ID_RE}$", description="host-pid, as the workers page shows")


def workers(c: Console) -> list[dict[str, Any]]:
    """Every worker process with a record in a queue directory this console reads; one
    process serving several queues is one entry."""
    found: dict[str, dict[str, Any]] = {}
    for name in c.dirs.names():
        config = c.dirs.get(name)
        if config is None:
            continue
        for record in registry.read_all(config.directory):
            entry = found.setdefault(record["id"], _entry(record))
            for queue in record.get("queues") or []:
                if isinstance(queue, dict) and queue.get("name") == name:
                    entry["queues"].append(_queue(queue))
    return sorted(found.values(), key=lambda w: w["id"])


def _entry(record: dict[str, Any]) -> dict[str, Any]:
    updated = _number(record.get("updated"))
    state = str(record.get("state", "running"))
    if updated is None or time.time() - updated > LOST_AFTER_S:
        state = "lost"
    elif state not in ("running", "quiet", "stopping"):
        state = "running"
    return {
        "id": record["id"],
        "host": str(record.get("host", "")),
        "pid": int(_number(record.get("pid")) or 0),
        "state": state,
        "started": _number(record.get("started")),
        "updated": updated,
        "queues": [],
        "latency": record.get("latency") if isinstance(record.get("latency"), dict) else None,
    }


def _queue(doc: dict[str, Any]) -> dict[str, Any]:
    running = [r for r in doc.get("running") or [] if isinstance(r, dict) and "id" in r]
    outcomes = doc.get("outcomes") if isinstance(doc.get("outcomes"), dict) else {}
    return {
        "name": str(doc.get("name", "")),
        "slots": int(_number(doc.get("slots")) or 0),
        "busy": int(_number(doc.get("busy")) or 0),
        "running": [
            {"id": str(r["id"]), "since": _number(r.get("since")), "pid": r.get("pid")}
            for r in running
            if r.get("pid") is None or isinstance(r.get("pid"), int)
        ],
        "outcomes": {str(k): int(v) for k, v in outcomes.items() if isinstance(v, int)},
    }


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def control(c: Console, wid: str, word: str) -> dict[str, Any]:
    if not re.fullmatch(WORKER_ID_RE, wid):
        raise ApiError(404, "no_worker", f"no worker {wid[:80]!r}")
    entry = next((w for w in workers(c) if w["id"] == wid), None)
    if entry is None:
        raise ApiError(404, "no_worker", f"no worker {wid!r}")
    if entry["state"] in ("lost", "stopping"):
        raise ApiError(409, "worker_gone", f"worker {wid} is {entry['state']}")
    sent = False
    for queue in entry["queues"]:
        config = c.dirs.get(queue["name"])
        if config is not None:
            sent = registry.request(config.directory, wid, word) or sent
    if not sent:
        raise ApiError(404, "no_worker", f"no worker {wid!r}")
    return {"id": wid, "requested": word}


@router.get("/workers", response_model=schemas.WorkerList, tags=["workers"])
def list_workers(c: Console = Depends(console)) -> dict[str, Any]:
    """Worker processes: state (running, quiet, stopping, lost), slots, what each runs."""
    return {"workers": workers(c)}


@router.post("/workers/{wid}/{word}", response_model=schemas.WorkerControl, tags=["workers"])
def control_worker(
    word: Literal["quiet", "stop"],
    wid: str = WorkerId,
    c: Console = Depends(console),
) -> dict[str, Any]:
    """`quiet`: take no new messages, finish the running ones, stay up. `stop`: as TERM
    (finish within the worker's grace period, then exit). Acted on within a second."""
    return control(c, wid, word)


def cluster(c: Console) -> dict[str, Any]:
    """Nodes and the links each reports (HELLO), read defensively: the cluster bus is being
    built, so a node may know no others yet, and INFO may grow cluster fields."""
    snap = c.sampler.snapshot()
    nodes = [{k: v for k, v in n.items() if k != "raw_info"} for n in snap.nodes]
    links = []
    ids = {n["id"] for n in nodes if n.get("id")}
    for node in nodes:
        for other in node.get("known") or []:
            ids.add(other["id"])
            links.append(
                {
                    "source": node["id"],
                    "target": other["id"],
                    "target_address": other["address"],
                    "flags": other["flags"],
                }
            )
    return {"nodes": nodes, "links": links, "size": len(ids)}


@router.get("/cluster", response_model=schemas.Cluster, tags=["nodes"])
def get_cluster(c: Console = Depends(console)) -> dict[str, Any]:
    """Every node (up or not, flags, jobs), and the links each node reports with the
    flags it sees on the other end (PFAIL, FAIL, no link)."""
    return cluster(c)
