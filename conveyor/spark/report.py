"""The HTML report of `conveyor analyze`, and the plain data it is drawn from.

Owns the result types of the analytics job (`Summary`, `ReportData` and its rows) and turning
them into one self-contained `report.html`: plots are PNGs drawn with matplotlib's Agg canvas
and embedded as base64, so the file opens offline and names no external URL. Nothing here
touches Spark; `conveyor.spark.analyze` computes the numbers and collects them into these types.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html import escape
from pathlib import Path

from matplotlib import dates
from matplotlib.figure import Figure


@dataclass(frozen=True)
class Summary:
    """What one `analyze` run found and wrote. Event counts count log lines, not jobs."""

    event_dir: str
    out_dir: str
    events: int  # well-formed lines, whatever their event
    malformed_lines: int  # skipped: not JSON, wrong types, or no time_ms/event/id
    unknown_events: int  # well-formed, but an event name this version does not know
    added: int
    queued: int
    delivered: int
    acked: int
    nacked: int
    requeued: int  # every "requeued" line: after a NACK, a RETRY timeout or an ENQUEUE
    requeued_without_nack: int  # those not putting back a NACKed job
    expired: int
    deleted: int
    dead_lettered: int
    evicted: int
    jobs: int  # distinct job ids
    queues: int
    nodes: int
    first_event_ms: int
    last_event_ms: int
    dead_letter_candidates: int
    redelivery_threshold: int
    tables: dict[str, str] = field(default_factory=dict)  # name -> directory
    report_path: str = ""

    @property
    def span_ms(self) -> int:
        return self.last_event_ms - self.first_event_ms


@dataclass(frozen=True)
class ThroughputPoint:
    start_ms: int  # bucket start, UTC epoch ms
    jobs_in: float  # per ReportData.rate_seconds, averaged over the bucket
    jobs_out: float
    acks: float


@dataclass(frozen=True)
class LatencyRow:
    scope: str  # "all queues" or a queue name
    metric: str  # "wait_ms" or "ack_ms"
    jobs: int  # jobs with a value
    p50: int | None
    p90: int | None
    p99: int | None
    max: int | None


@dataclass(frozen=True)
class QueueRow:
    queue: str
    jobs_in: int
    jobs_out: int
    acks: int
    nacks: int
    requeues: int
    expiries: int
    dead_letters: int


@dataclass(frozen=True)
class RedeliveredJob:
    id: str
    queue: str
    redeliveries: int
    nacks: int
    additional_deliveries: int
    deliveries: int
    dead_lettered: bool
    last_event: str


@dataclass(frozen=True)
class ReportData:
    summary: Summary
    bucket_s: int  # width of a throughput point: seconds for short logs, else minutes
    throughput: list[ThroughputPoint]
    latency: list[LatencyRow]  # "all queues" first, then the busiest queues
    queues: list[QueueRow]  # busiest first, at most the report's limit
    queues_total: int
    top_redelivered: list[RedeliveredJob]

    @property
    def rate_seconds(self) -> int:
        """Throughput rates are per second for buckets under a minute, else per minute."""
        return 1 if self.bucket_s < 60 else 60


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def format_time(ms: int) -> str:
    return _utc(ms).strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def format_duration(ms: int) -> str:
    seconds, millis = divmod(ms, 1000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {seconds:02d}s"
    if minutes:
        return f"{minutes}m {seconds:02d}s"
    return f"{seconds}.{millis:03d}s"


def _png(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="" src="data:image/png;base64,{encoded}">'


def _bucket_text(seconds: int) -> str:
    return f"{seconds}-second" if seconds < 60 else f"{seconds // 60}-minute"


def throughput_plot(data: ReportData) -> str:
    # Figure() rather than pyplot: no global state, and savefig uses the Agg canvas.
    figure = Figure(figsize=(10, 3.6))
    axes = figure.subplots()
    points = data.throughput
    # Each point is the average rate over its bucket: a step per bucket, drawn to the end of
    # the last one, so the x axis spans exactly the buckets the log covers (one point alone
    # would make matplotlib pad the axis by years).
    edges = [_utc(point.start_ms) for point in points]
    edges.append(edges[-1] + timedelta(seconds=data.bucket_s))
    for label, values in (
        ("in (added)", [p.jobs_in for p in points]),
        ("out (delivered)", [p.jobs_out for p in points]),
        ("acks", [p.acks for p in points]),
    ):
        axes.step(edges, [*values, values[-1]], where="post", label=label, linewidth=1.4)
    axes.set_xlim(edges[0], edges[-1])
    locator = dates.AutoDateLocator(tz=UTC, minticks=3, maxticks=9)
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator, tz=UTC))
    unit = "second" if data.rate_seconds == 1 else "minute"
    averaged = (
        f", averaged over {_bucket_text(data.bucket_s)} buckets"
        if data.bucket_s != data.rate_seconds
        else ""
    )
    axes.set_ylabel(f"jobs per {unit}")
    axes.set_title(f"Throughput, all queues{averaged}")
    axes.set_xlabel("time (UTC)")
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper right")
    return _png(figure)


def latency_plot(data: ReportData) -> str:
    figure = Figure(figsize=(8, 3.6))
    axes = figure.subplots()
    overall = [row for row in data.latency if row.scope == "all queues"]
    labels = ["p50", "p90", "p99", "max"]
    width = 0.38
    positive: list[int] = []
    for index, row in enumerate(overall):
        values = [row.p50, row.p90, row.p99, row.max]
        heights = [value or 0 for value in values]
        positive += [value for value in heights if value > 0]
        offsets = [i + (index - 0.5) * width for i in range(len(labels))]
        bars = axes.bar(offsets, heights, width, label=row.metric)
        axes.bar_label(bars, labels=[_ms(value) for value in values], fontsize=8)
    axes.set_xticks(range(len(labels)), labels)
    # Tails are often orders of magnitude above the median; a log axis keeps p50 visible.
    if positive and max(positive) > 50 * min(positive):
        axes.set_yscale("log")
    axes.set_ylabel("milliseconds")
    axes.set_title("Latency, all queues (wait: added to first delivery; ack: added to ack)")
    axes.grid(axis="y", alpha=0.3)
    axes.legend()
    return _png(figure)


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _table(headers: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for value in row:
            if value is None or (isinstance(value, int) and not isinstance(value, bool)):
                cells.append(f'<td class="n">{_ms(value)}</td>')  # type: ignore[arg-type]
            else:
                cells.append(f"<td>{escape(str(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    if not body:
        body.append(f'<tr><td colspan="{len(headers)}">none</td></tr>')
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.8em; }
table { border-collapse: collapse; margin: .6em 0; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; }
th { background: #f2f2f2; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; } .muted { color: #666; } code { font-size: .95em; }
"""


def render_report(data: ReportData) -> str:
    """The whole report as one HTML document; every string from the log is escaped."""
    s = data.summary
    summary_rows: list[list[object]] = [
        ["Events (well-formed lines)", s.events],
        ["Malformed lines skipped", s.malformed_lines],
        ["Unknown event names", s.unknown_events],
        ["Jobs (distinct ids)", s.jobs],
        ["Jobs added", s.added],
        ["Jobs queued", s.queued],
        ["Jobs delivered", s.delivered],
        ["Jobs acked", s.acked],
        ["Jobs nacked", s.nacked],
        ["Jobs requeued, all (after a NACK, RETRY timeout, ENQUEUE)", s.requeued],
        ["Jobs requeued without a NACK (RETRY timeout, ENQUEUE)", s.requeued_without_nack],
        ["Jobs expired (TTL)", s.expired],
        ["Jobs deleted", s.deleted],
        ["Jobs dead-lettered", s.dead_lettered],
        ["Jobs evicted", s.evicted],
        ["Queues", s.queues],
        ["Nodes", s.nodes],
        ["First event", format_time(s.first_event_ms)],
        ["Last event", format_time(s.last_event_ms)],
        ["Time span", format_duration(s.span_ms)],
        [
            f"Dead-letter candidates (redeliveries >= {s.redelivery_threshold}, or dead-lettered)",
            s.dead_letter_candidates,
        ],
    ]
    latency_rows: list[list[object]] = [
        [row.scope, row.metric, row.jobs, row.p50, row.p90, row.p99, row.max]
        for row in data.latency
    ]
    queue_rows: list[list[object]] = [
        [q.queue, q.jobs_in, q.jobs_out, q.acks, q.nacks, q.requeues, q.expiries, q.dead_letters]
        for q in data.queues
    ]
    job_rows: list[list[object]] = [
        [
            j.id,
            j.queue,
            j.redeliveries,
            j.nacks,
            j.additional_deliveries,
            j.deliveries,
            "yes" if j.dead_lettered else "no",
            j.last_event,
        ]
        for j in data.top_redelivered
    ]
    queues_note = (
        f'<p class="muted">The {len(data.queues)} busiest of {data.queues_total} queues; '
        "every queue is in <code>queue_minute/</code>.</p>"
        if data.queues_total > len(data.queues)
        else ""
    )
    tables = "".join(
        f"<li><code>{escape(name)}/</code>: <code>{escape(path)}</code></li>"
        for name, path in s.tables.items()
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Conveyor job-event report</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>Conveyor job-event report</h1>
<p class="muted">Event log <code>{escape(s.event_dir)}</code>,
{escape(format_time(s.first_event_ms))} to {escape(format_time(s.last_event_ms))}.
Counts are events in the log; a job delivered twice counts twice under "delivered".</p>

<h2>Summary</h2>
{_table(["", "count"], summary_rows)}

<h2>Throughput</h2>
{throughput_plot(data)}

<h2>Latency</h2>
<p class="muted">wait_ms: from "added" to the first "delivered"; ack_ms: from "added" to
"acked". Jobs whose "added" is not in the log have neither.</p>
{latency_plot(data)}
{_table(["scope", "metric", "jobs", "p50", "p90", "p99", "max"], latency_rows)}

<h2>Queues</h2>
{queues_note}
{
        _table(
            ["queue", "in", "out", "acks", "nacks", "requeues", "expiries", "dead letters"],
            queue_rows,
        )
    }

<h2>Most re-delivered jobs</h2>
<p class="muted">Redeliveries: the job's highest nacks + additional_deliveries counters.</p>
{
        _table(
            [
                "id",
                "queue",
                "redeliveries",
                "nacks",
                "additional deliveries",
                "deliveries",
                "dead-lettered",
                "last event",
            ],
            job_rows,
        )
    }

<h2>Tables</h2>
<ul>{tables}</ul>
</body>
</html>
"""


def write_report(path: Path, data: ReportData) -> None:
    path.write_text(render_report(data), encoding="utf-8")
