"""One cached picture of the nodes and queues, shared by pages, live streams and /metrics.

Every open page streams updates about once a second; if each asked the node itself, ten
browsers would cost the node ten times as much. Instead a snapshot is taken at most once
per `interval_s` whoever asks, and rates (jobs in/out per second) come from the difference
between two snapshots.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from conveyor.client import ConveyorError
from conveyor.web import workdirs
from conveyor.web.gateway import Gateway
from conveyor.web.ids import printable
from conveyor.web.workdirs import QueueDirs

HISTORY = 60  # samples kept for the overview's chart
MAX_QUEUES = 1000  # queues described per snapshot; more are counted, not described


@dataclass
class Snapshot:
    taken: float  # time.time()
    nodes: list[dict[str, Any]] = field(default_factory=list)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    queues_total: int = 0
    rate_in: float = 0.0
    rate_out: float = 0.0
    error: str | None = None  # the shared client could not reach any node
    # With `error`: this host's queue directories not in `queues`, from disk only (name,
    # messages by state, workers), so their err counts still show while no node answers.
    offline: list[dict[str, Any]] = field(default_factory=list)

    def totals(self) -> dict[str, int]:
        return {
            "queues": self.queues_total,
            "queued": sum(q.get("len", 0) for q in self.queues.values()),
            "jobs_in": sum(q.get("jobs_in", 0) for q in self.queues.values()),
            "jobs_out": sum(q.get("jobs_out", 0) for q in self.queues.values()),
        }


class Sampler:
    def __init__(self, gateway: Gateway, dirs: QueueDirs, interval_s: float = 1.0) -> None:
        self.gateway = gateway
        self.dirs = dirs
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._last: Snapshot | None = None
        self._finished = 0.0  # time.monotonic() when the last snapshot was complete
        self._generation = 0  # snapshots taken so far
        self.history: deque[tuple[float, float, float]] = deque(maxlen=HISTORY)

    def snapshot(self) -> Snapshot:
        """The latest snapshot, taken now if the last one is older than the interval.

        A caller that waited while another took one gets that one: against a node that
        hangs, a snapshot takes the client's timeouts (seconds), and every waiter taking
        its own in turn would queue every page, stream and scrape behind N of them."""
        generation = self._generation
        with self._lock:
            last = self._last
            if last is not None and (
                self._generation != generation
                or time.monotonic() - self._finished < self.interval_s
            ):
                return last
            current = self._take()
            if last is not None:
                _rates(last, current)
            self.history.append((current.taken, current.rate_in, current.rate_out))
            self._last = current
            self._finished = time.monotonic()
            self._generation += 1
            return current

    def _take(self) -> Snapshot:
        snap = Snapshot(taken=time.time())
        snap.nodes = self._nodes()
        try:
            names = self._queue_names()
            snap.queues_total = len(names)
            for name in names[:MAX_QUEUES]:
                doc = self.queue(name)
                snap.queues[doc["name"]] = doc
        except ConveyorError as exc:
            snap.error = str(exc)
            snap.offline = self._from_disk(snap.queues)
        return snap

    def _from_disk(self, described: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        docs = []
        for name in self.dirs.names()[:MAX_QUEUES]:
            config = self.dirs.get(name)
            if config is None or printable(name) in described:
                continue
            docs.append(
                {
                    "name": printable(name),
                    "messages": workdirs.counts(config),
                    "workers": config.num_workers,
                }
            )
        return docs

    def _queue_names(self) -> list[str]:
        # QSCAN pages through every queue: bounded by the node's queue count, itself bounded
        # by the node's memory; a console that meets more than MAX_QUEUES stops describing.
        names: set[str] = set(self.dirs.names())
        for index, name in enumerate(self.gateway.client.scan_queues(count=200)):
            if index >= MAX_QUEUES * 10:
                break
            names.add(name)
        return sorted(names)

    def queue(self, name: str) -> dict[str, Any]:
        """QSTAT plus this host's queue directory (if any), in the API's field names."""
        # As bytes: a name that is not UTF-8 (surrogate escapes) goes back as it came.
        stat = self.gateway.client.qstat(name.encode("utf-8", "surrogateescape")) or {}
        config = self.dirs.get(name)
        doc: dict[str, Any] = {
            "name": printable(name),
            "exists": bool(stat),
            "len": int(stat.get("len", 0)),
            "age": int(stat.get("age", 0)),
            "idle": int(stat.get("idle", 0)),
            "blocked": int(stat.get("blocked", 0)),
            "jobs_in": int(stat.get("jobs-in", 0)),
            "jobs_out": int(stat.get("jobs-out", 0)),
            "pause": str(stat.get("pause", "none")),
            "rate_in": 0.0,
            "rate_out": 0.0,
            "script_queue": config is not None,
            "messages": workdirs.counts(config) if config is not None else None,
            "workers": config.num_workers if config is not None else None,
        }
        return doc

    def _nodes(self) -> list[dict[str, Any]]:
        nodes = []
        learnt: list[str] = []
        for address in self.gateway.addresses():
            nodes.append(self._node(address, learnt))
        self.gateway.learn(learnt)
        return nodes

    def _node(self, address: str, learnt: list[str]) -> dict[str, Any]:
        doc: dict[str, Any] = {"address": address, "up": False, "id": None, "error": None}
        try:
            client = self.gateway.node(address)
            hello = client.hello()
            info = client.info()
        except ConveyorError as exc:
            doc["error"] = str(exc)
            return doc
        except Exception as exc:  # an address the client cannot even parse: show it as down
            doc["error"] = f"{type(exc).__name__}: {exc}"
            return doc
        learnt.extend(n.address for n in hello.nodes)
        priority = next((n.priority for n in hello.nodes if n.id == hello.node_id), 1)
        doc.update(up=True, id=hello.node_id, priority=priority, info=_info_summary(info))
        doc["flags"] = _flags(priority, info)
        # The nodes this one knows (HELLO): the cluster page draws its links from them.
        doc["known"] = [
            {
                "id": n.id,
                "address": n.address,
                "priority": n.priority,
                "flags": _flags(n.priority, {}),
            }
            for n in hello.nodes
            if n.id != hello.node_id
        ][:256]
        doc["raw_info"] = info
        return doc


# INFO fields shown on the overview and exported as metrics (all are numbers).
INFO_FIELDS = (
    "uptime_in_seconds",
    "connected_clients",
    "blocked_clients",
    "used_memory",
    "used_memory_rss",
    "maxmemory",
    "registered_jobs",
    "registered_queues",
    "expired_jobs",
    "evicted_jobs",
    "dead_lettered_jobs",
    "delivered_jobs",
    "acked_jobs",
    "nacked_jobs",
    "requeued_jobs",
    "total_connections_received",
    "total_commands_processed",
    "instantaneous_ops_per_sec",
    "rejected_connections",
)


def _info_summary(info: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {
        k: info[k] for k in INFO_FIELDS if isinstance(info.get(k), int | float)
    }
    summary["version"] = str(info.get("conveyor_version") or info.get("disque_version") or "")
    summary["loading"] = int(info.get("loading", 0) or 0) if "loading" in info else 0
    return summary


def _flags(priority: int, info: dict[str, Any]) -> list[str]:
    """HELLO's priority as Disque's flags, plus what INFO tells."""
    flags = {1: [], 5: ["nolink"], 10: ["pfail"], 100: ["fail"]}.get(priority, [])
    flags = list(flags)
    if info.get("loading") == 1:
        flags.append("loading")
    if info.get("aof_enabled") == 1:
        flags.append("aof")
    # A node leaving the cluster (Disque's CLUSTER LEAVING), once INFO tells it.
    if str(info.get("leaving", info.get("cluster_leaving", ""))).lower() in ("1", "yes", "true"):
        flags.append("leaving")
    return flags or ["ok"]


def _rates(previous: Snapshot, current: Snapshot) -> None:
    elapsed = current.taken - previous.taken
    if elapsed <= 0:
        return
    total_in = total_out = 0.0
    for name, queue in current.queues.items():
        before = previous.queues.get(name)
        if before is None:
            continue
        # A counter that went down means the queue was collected and created again.
        queue["rate_in"] = max(0, queue["jobs_in"] - before["jobs_in"]) / elapsed
        queue["rate_out"] = max(0, queue["jobs_out"] - before["jobs_out"]) / elapsed
        total_in += queue["rate_in"]
        total_out += queue["rate_out"]
    current.rate_in, current.rate_out = total_in, total_out
