"""`/metrics` in the Prometheus text format, from the sampler's snapshot.

A custom collector on a registry of its own: each scrape reads the (cached) snapshot, so
metrics always agree with the pages and a scrape costs the node no more than a page does.
Counters are the node's own (QSTAT jobs-in/jobs-out, INFO's totals): Prometheus computes
rates from them; the console keeps no counter that a restart of the console would reset.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool

from conveyor.web import api_ops
from conveyor.web.console import Console, console

router = APIRouter(include_in_schema=False)

# INFO field -> (metric name, help, is a counter)
_INFO_METRICS = {
    "uptime_in_seconds": ("conveyor_node_uptime_seconds", "Seconds since the node started", False),
    "connected_clients": ("conveyor_node_connected_clients", "Client connections", False),
    "blocked_clients": ("conveyor_node_blocked_clients", "Clients blocked in GETJOB", False),
    "used_memory": ("conveyor_node_used_memory_bytes", "Memory the node accounts for", False),
    "used_memory_rss": ("conveyor_node_rss_bytes", "Resident set size of the node", False),
    "registered_jobs": ("conveyor_node_jobs", "Jobs the node holds, in any state", False),
    "registered_queues": ("conveyor_node_queues", "Queues the node holds", False),
    "expired_jobs": ("conveyor_node_expired_jobs", "Jobs removed at their TTL", True),
    "evicted_jobs": ("conveyor_node_evicted_jobs", "Jobs evicted under maxmemory", True),
    "dead_lettered_jobs": ("conveyor_node_dead_lettered_jobs", "Jobs moved to the DLQ", True),
    "delivered_jobs": ("conveyor_node_delivered_jobs", "Jobs handed to consumers", True),
    "acked_jobs": ("conveyor_node_acked_jobs", "Jobs acknowledged here", True),
    "nacked_jobs": ("conveyor_node_nacked_jobs", "NACKs received", True),
    "requeued_jobs": ("conveyor_node_requeued_jobs", "Jobs queued again (retry, NACK)", True),
    "total_connections_received": (
        "conveyor_node_connections_received",
        "Connections accepted",
        True,
    ),
    "total_commands_processed": ("conveyor_node_commands_processed", "Commands run", True),
    "rejected_connections": ("conveyor_node_rejected_connections", "Connections refused", True),
}


class SnapshotCollector(Collector):
    def __init__(self, the_console: Console) -> None:
        self.console = the_console
        self.sampler = the_console.sampler

    def collect(self) -> Iterator[Metric]:
        snap = self.sampler.snapshot()
        yield from self._nodes(snap.nodes)
        yield from _cluster(snap.nodes)
        yield from self._queues(list(snap.queues.values()), snap.offline)
        yield self._jobs(snap.nodes, snap.totals()["queued"])
        yield from _workers(api_ops.workers(self.console))
        yield from _streams(self.console)

    def _jobs(self, nodes: list[dict[str, Any]], queued: int) -> Metric:
        """Jobs by state across the nodes: queued (the queues' lengths) and the rest
        (delivered and not yet acknowledged, or waiting out a delay)."""
        jobs = GaugeMetricFamily("conveyor_jobs", "Jobs on the nodes by state", labels=["state"])
        registered = sum((n.get("info") or {}).get("registered_jobs", 0) for n in nodes)
        jobs.add_metric(["queued"], queued)
        jobs.add_metric(["not_queued"], max(0, registered - queued))
        return jobs

    def _nodes(self, nodes: list[dict[str, Any]]) -> Iterator[Metric]:
        up = GaugeMetricFamily("conveyor_node_up", "1 if the node answered", labels=["node"])
        families: dict[str, Metric] = {}
        for field, (name, help_text, counter) in _INFO_METRICS.items():
            family = CounterMetricFamily if counter else GaugeMetricFamily
            families[field] = family(name, help_text, labels=["node"])
        for node in nodes:
            up.add_metric([node["address"]], 1.0 if node["up"] else 0.0)
            info = node.get("info") or {}
            for field, family in families.items():
                if isinstance(info.get(field), int | float):
                    family.add_metric([node["address"]], float(info[field]))  # type: ignore[attr-defined]
        yield up
        yield from families.values()

    def _queues(
        self, queues: list[dict[str, Any]], offline: list[dict[str, Any]]
    ) -> Iterator[Metric]:
        """`offline`: queue directories whose node figures are unknown (no node answers);
        their messages on disk are still counted."""
        labels = ["queue"]
        length = GaugeMetricFamily("conveyor_queue_length", "Jobs queued (QLEN)", labels=labels)
        blocked = GaugeMetricFamily(
            "conveyor_queue_blocked_clients", "Consumers blocked on the queue", labels=labels
        )
        jobs_in = CounterMetricFamily(
            "conveyor_queue_jobs_in", "Jobs queued (QSTAT)", labels=labels
        )
        jobs_out = CounterMetricFamily(
            "conveyor_queue_jobs_out", "Jobs delivered (QSTAT)", labels=labels
        )
        paused = GaugeMetricFamily(
            "conveyor_queue_paused", "1 if paused in that direction", labels=["queue", "direction"]
        )
        messages = GaugeMetricFamily(
            "conveyor_messages", "Worker messages on this host by state", labels=["queue", "state"]
        )
        for queue in queues:
            name = queue["name"]
            length.add_metric([name], queue["len"])
            blocked.add_metric([name], queue["blocked"])
            jobs_in.add_metric([name], queue["jobs_in"])
            jobs_out.add_metric([name], queue["jobs_out"])
            pause = queue["pause"]
            paused.add_metric([name, "in"], 1.0 if pause in ("in", "all") else 0.0)
            paused.add_metric([name, "out"], 1.0 if pause in ("out", "all") else 0.0)
        for queue in [*queues, *offline]:
            for state, count in (queue.get("messages") or {}).items():
                messages.add_metric([queue["name"], state], count)
        yield from (length, blocked, jobs_in, jobs_out, paused, messages)


def _streams(c: Console) -> Iterator[Metric]:
    open_now = GaugeMetricFamily("conveyor_console_streams", "Live streams open (live pages)")
    open_now.add_metric([], c.streams.open)
    limit = GaugeMetricFamily("conveyor_console_streams_max", "Live streams allowed at once")
    limit.add_metric([], c.streams.limit)
    yield from (open_now, limit)


def _cluster(nodes: list[dict[str, Any]]) -> Iterator[Metric]:
    """Node flags and the links each node reports (HELLO), by what it sees of the peer."""
    flags = GaugeMetricFamily(
        "conveyor_node_flag", "1 for each flag the node has", labels=["node", "flag"]
    )
    links = GaugeMetricFamily(
        "conveyor_cluster_links",
        "Other nodes a node knows, by the state it sees them in",
        labels=["node", "state"],
    )
    for node in nodes:
        if not node["up"]:
            flags.add_metric([node["address"], "down"], 1.0)
            continue
        for flag in node.get("flags") or []:
            flags.add_metric([node["address"], flag], 1.0)
        seen = {"ok": 0, "nolink": 0, "pfail": 0, "fail": 0}
        for other in node.get("known") or []:
            state = (other.get("flags") or ["ok"])[0]
            seen[state] = seen.get(state, 0) + 1
        for state, count in seen.items():
            links.add_metric([node["address"], state], count)
    yield flags
    yield links


def _workers(workers: list[dict[str, Any]]) -> Iterator[Metric]:
    """From the workers' records: slots, busy slots, outcomes and add-to-deliver latency.
    Per worker process where a counter is involved, so each series only ever grows."""
    slots = GaugeMetricFamily("conveyor_worker_slots", "Worker slots", labels=["queue"])
    busy = GaugeMetricFamily(
        "conveyor_worker_slots_busy", "Slots running a message", labels=["queue"]
    )
    states = GaugeMetricFamily("conveyor_workers", "Worker processes by state", labels=["state"])
    outcomes = CounterMetricFamily(
        "conveyor_worker_messages",
        "Messages settled by a worker, by outcome",
        labels=["worker", "queue", "outcome"],
    )
    latency = HistogramMetricFamily(
        "conveyor_add_to_deliver_latency_seconds",
        "From a message being due (added, plus its delay) to a worker slot taking it",
        labels=["worker"],
    )
    per_queue: dict[str, list[int]] = {}
    by_state = {"running": 0, "quiet": 0, "stopping": 0, "lost": 0}
    for worker in workers:
        by_state[worker["state"]] = by_state.get(worker["state"], 0) + 1
        for queue in worker["queues"]:
            for outcome, count in queue["outcomes"].items():
                outcomes.add_metric([worker["id"], queue["name"], outcome], count)
            if worker["state"] != "lost":
                totals = per_queue.setdefault(queue["name"], [0, 0])
                totals[0] += queue["slots"]
                totals[1] += queue["busy"]
        buckets = _buckets(worker.get("latency"))
        if buckets is not None:
            latency.add_metric([worker["id"]], buckets[0], buckets[1])
    for name, (total, running) in sorted(per_queue.items()):
        slots.add_metric([name], total)
        busy.add_metric([name], running)
    for state, count in by_state.items():
        states.add_metric([state], count)
    yield from (slots, busy, states, outcomes, latency)


def _buckets(doc: Any) -> tuple[list[tuple[str, float]], float] | None:
    """A worker's latency record as cumulative (le, count) pairs and the sum."""
    try:
        bounds, counts = list(doc["buckets"]), [int(n) for n in doc["counts"]]
        total = float(doc["sum"])
    except (KeyError, TypeError, ValueError):
        return None
    if len(counts) != len(bounds) + 1:
        return None
    pairs, running = [], 0
    for bound, count in zip([*map(str, map(float, bounds)), "+Inf"], counts, strict=True):
        running += count
        pairs.append((bound, float(running)))
    return pairs, total


def make_registry(the_console: Console) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(the_console))
    return registry


@router.get("/metrics")
async def metrics(c: Console = Depends(console)) -> Response:
    if c.registry is None:
        c.registry = make_registry(c)
    registry = c.registry
    # The snapshot may talk to the nodes: off the event loop.
    body = await run_in_threadpool(generate_latest, registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
