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
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool

from conveyor.web.console import Console, console
from conveyor.web.sampler import Sampler

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
    "total_connections_received": (
        "conveyor_node_connections_received",
        "Connections accepted",
        True,
    ),
    "total_commands_processed": ("conveyor_node_commands_processed", "Commands run", True),
    "rejected_connections": ("conveyor_node_rejected_connections", "Connections refused", True),
}


class SnapshotCollector(Collector):
    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def collect(self) -> Iterator[Metric]:
        snap = self.sampler.snapshot()
        yield from self._nodes(snap.nodes)
        yield from self._queues(list(snap.queues.values()))
        yield self._jobs(snap.nodes, snap.totals()["queued"])

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

    def _queues(self, queues: list[dict[str, Any]]) -> Iterator[Metric]:
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
            for state, count in (queue.get("messages") or {}).items():
                messages.add_metric([name, state], count)
        yield from (length, blocked, jobs_in, jobs_out, paused, messages)


def make_registry(sampler: Sampler) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(sampler))
    return registry


@router.get("/metrics")
async def metrics(c: Console = Depends(console)) -> Response:
    if c.registry is None:
        c.registry = make_registry(c.sampler)
    registry = c.registry
    # The snapshot may talk to the nodes: off the event loop.
    body = await run_in_threadpool(generate_latest, registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
