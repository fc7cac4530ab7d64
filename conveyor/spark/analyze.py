"""The job-event analytics batch job behind `conveyor analyze`.

Owns the run: checking the event directory, writing the three Parquet tables under the
output directory (`queue_minute/`, `job_latency/`, `dead_letter_candidates/`) and the small
aggregates the HTML report is drawn from. The log is read once and cached; everything is
aggregated by Spark and only report-sized results reach the driver. The schema and the
tables' columns are `conveyor.spark.tables`, the HTML is `conveyor.spark.report`, the
command line and progress display are `conveyor.spark.analyze_cli`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from conveyor.spark.report import (
    LatencyRow,
    QueueRow,
    RedeliveredJob,
    ReportData,
    Summary,
    ThroughputPoint,
    write_report,
)
from conveyor.spark.tables import (
    EVENT_SCHEMA,
    EVENT_TYPES,
    candidates_table,
    event_is,
    is_candidate,
    job_latency_table,
    queue_minute_table,
    read_events,
    requeued_after_nack,
    summary_row,
    worst_first,
)

__all__ = [
    "EVENT_SCHEMA",
    "EVENT_TYPES",
    "AnalyzeError",
    "Summary",
    "analyze",
    "candidates_table",
    "check_event_dir",
    "prepare_out_dir",
]


TABLES = ("queue_minute", "job_latency", "dead_letter_candidates")
REPORT_FILE = "report.html"

# Report limits: enough to read, small enough to collect to the driver whatever the log size.
MAX_THROUGHPUT_POINTS = 720
# Logs shorter than this get throughput buckets of seconds (counted from the events), longer
# ones buckets of minutes (summed from queue_minute): a 20-second log is not one point.
FINE_THROUGHPUT_SPAN_MS = 30 * 60_000
FINE_BUCKETS_S = (1, 2, 5, 10, 15, 30)
MAX_REPORT_QUEUES = 20
TOP_REDELIVERED = 25

StageHook = Callable[[str], AbstractContextManager[object]]

STAGES = (
    "reading events",
    "per-minute table",
    "latency table",
    "dead-letter candidates",
    "report",
)


class AnalyzeError(Exception):
    """A problem with the input or arguments, worth one line to the user."""


def _no_stage(name: str) -> AbstractContextManager[object]:
    return nullcontext()


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local_path(path: str) -> Path:
    return Path(path.removeprefix("file://")).expanduser().resolve()


def check_event_dir(event_dir: str) -> str:
    """The URI Spark should read, or AnalyzeError for a missing or empty local directory.

    Remote URIs (hdfs://, s3a://, ...) are passed through; Spark reports on those itself.
    """
    if not _is_local(event_dir):
        return event_dir
    path = _local_path(event_dir)
    if not path.exists():
        raise AnalyzeError(f"event directory {event_dir} does not exist")
    if not path.is_dir():
        raise AnalyzeError(f"{event_dir} is not a directory")
    if next(path.rglob("*.jsonl"), None) is None:
        raise AnalyzeError(f"event directory {event_dir} holds no *.jsonl event files")
    # An absolute URI: a cluster's executors do not share the driver's working directory.
    return path.as_uri()


def prepare_out_dir(out_dir: str | Path) -> Path:
    """The output directory, made if missing, or AnalyzeError when it cannot be (a path
    through a file, a read-only filesystem)."""
    out = Path(out_dir).expanduser().resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise AnalyzeError(f"cannot create output directory {out_dir}: {error}") from None
    return out


def _throughput(
    queue_minute: DataFrame, events: DataFrame, first_ms: int, last_ms: int
) -> tuple[int, list[ThroughputPoint]]:
    """(bucket width in seconds, one point per bucket from the first event's to the last's).

    Rates are per second for buckets under a minute, per minute otherwise."""
    if last_ms - first_ms < FINE_THROUGHPUT_SPAN_MS:
        span_s = last_ms // 1000 - first_ms // 1000 + 1
        bucket_s = next(
            (b for b in FINE_BUCKETS_S if math.ceil(span_s / b) <= MAX_THROUGHPUT_POINTS), 60
        )
        first_s = first_ms // 1000 // bucket_s * bucket_s
        bucket = F.floor((F.col("time_ms") - F.lit(first_s * 1000)) / F.lit(bucket_s * 1000))
        counts = [F.count_if(event_is(name)).alias(alias) for name, alias in _THROUGHPUT_EVENTS]
        rows = events.groupBy(bucket.alias("bucket")).agg(*counts).collect()
        per_rate = bucket_s  # per second
    else:
        first_s = first_ms // 60_000 * 60
        minutes = (last_ms // 60_000 * 60 - first_s) // 60 + 1
        bucket_s = max(1, math.ceil(minutes / MAX_THROUGHPUT_POINTS)) * 60
        bucket = F.floor((F.unix_seconds("minute") - F.lit(first_s)) / F.lit(bucket_s))
        sums = [F.sum(column).alias(alias) for column, alias in _THROUGHPUT_COLUMNS]
        rows = queue_minute.groupBy(bucket.alias("bucket")).agg(*sums).collect()
        per_rate = bucket_s // 60  # per minute
    by_bucket = {row["bucket"]: row for row in rows}
    points = []
    # Buckets with no events have no row: fill them with zeros so the plot shows the gap.
    for index in range((last_ms // 1000 - first_s) // bucket_s + 1):
        row = by_bucket.get(index)
        start_ms = (first_s + index * bucket_s) * 1000
        if row is None:
            points.append(ThroughputPoint(start_ms, 0.0, 0.0, 0.0))
        else:
            points.append(
                ThroughputPoint(
                    start_ms, row["i"] / per_rate, row["o"] / per_rate, row["a"] / per_rate
                )
            )
    return bucket_s, points


# Throughput series: the event (or queue_minute column) each counts, and its short name.
_THROUGHPUT_EVENTS = (("added", "i"), ("delivered", "o"), ("acked", "a"))
_THROUGHPUT_COLUMNS = (("jobs_in", "i"), ("jobs_out", "o"), ("acks", "a"))


def _queue_rows(queue_minute: DataFrame) -> list[QueueRow]:
    """Totals of every queue, busiest first: one row a queue is small enough to collect."""
    columns = ["jobs_in", "jobs_out", "acks", "nacks", "requeues", "expiries", "dead_letters"]
    rows = queue_minute.groupBy("queue").agg(*[F.sum(name).alias(name) for name in columns])
    result = [
        QueueRow(queue=row["queue"] or "", **{name: int(row[name]) for name in columns})
        for row in rows.collect()
    ]
    result.sort(key=lambda q: (-q.jobs_in, -q.jobs_out, q.queue))
    return result


def _latency_rows(job_latency: DataFrame, queues: list[str]) -> list[LatencyRow]:
    aggregates = []
    for metric in ("wait_ms", "ack_ms"):
        aggregates += [
            F.count(metric).alias(f"{metric}_n"),
            F.percentile_approx(metric, [0.5, 0.9, 0.99]).alias(f"{metric}_p"),
            F.max(metric).alias(f"{metric}_max"),
        ]
    # One pass: rollup gives the per-queue rows and the all-queues row together.
    rows = (
        job_latency.rollup("queue")
        .agg(*aggregates, F.grouping("queue").alias("total"))
        .where((F.col("total") == 1) | F.col("queue").isin(*queues))
        .collect()
    )
    order = {queue: index for index, queue in enumerate(queues)}
    rows.sort(key=lambda row: -1 if row["total"] else order.get(row["queue"], len(order)))
    result = []
    for row in rows:
        scope = "all queues" if row["total"] else (row["queue"] or "")
        for metric in ("wait_ms", "ack_ms"):
            p = row[f"{metric}_p"] or [None, None, None]
            result.append(
                LatencyRow(
                    scope, metric, row[f"{metric}_n"], p[0], p[1], p[2], row[f"{metric}_max"]
                )
            )
    return result


def analyze(
    spark: SparkSession,
    event_dir: str | Path,
    out_dir: str | Path,
    redelivery_threshold: int = 2,
    *,
    stage: StageHook = _no_stage,
) -> Summary:
    """Read the event log under `event_dir`; write the tables and report under `out_dir`.

    `stage(name)` wraps each step (see STAGES), for a progress display. Raises AnalyzeError
    for a missing or empty event directory, a log with no well-formed event, or a bad
    threshold.
    """
    if redelivery_threshold < 1:
        raise AnalyzeError("the redelivery threshold must be at least 1")
    uri = check_event_dir(str(event_dir))
    out = prepare_out_dir(out_dir)
    table_paths = {name: str(out / name) for name in TABLES}

    cached: list[DataFrame] = []
    try:
        with stage(STAGES[0]):
            lines = read_events(spark, uri).cache()
            cached.append(lines)
            counts = summary_row(lines)
            events = lines.where(~F.col("malformed")).drop("malformed")
            if counts["first_event_ms"] is not None:
                counts["requeued_after_nack"] = requeued_after_nack(events)
        if counts["first_event_ms"] is None:
            raise AnalyzeError(
                f"no job events in {event_dir} "
                f"({counts['malformed_lines']} malformed lines skipped)"
            )

        with stage(STAGES[1]):
            queue_minute = queue_minute_table(events).cache()
            cached.append(queue_minute)
            # Unsorted: a sort costs an extra sampling job and readers cannot rely on it.
            queue_minute.write.mode("overwrite").parquet(table_paths["queue_minute"])
            # While the raw lines are cached: a short log's throughput counts them directly.
            bucket_s, throughput = _throughput(
                queue_minute,
                events,
                count_of(counts, "first_event_ms"),
                count_of(counts, "last_event_ms"),
            )

        with stage(STAGES[2]):
            job_latency = job_latency_table(events).cache()
            cached.append(job_latency)
            job_latency.write.mode("overwrite").parquet(table_paths["job_latency"])
        # Both derived tables are cached and complete; free the raw lines for what follows.
        lines.unpersist()

        with stage(STAGES[3]):
            candidates = candidates_table(job_latency, redelivery_threshold)
            # One file sorted worst first, so a plain read of the table comes back in order.
            candidates.coalesce(1).sortWithinPartitions(*worst_first()).write.mode(
                "overwrite"
            ).parquet(table_paths["dead_letter_candidates"])
            totals = job_latency.agg(
                F.count(F.lit(1)).alias("jobs"),
                F.count_if(is_candidate(redelivery_threshold)).alias("candidates"),
            ).first()
            assert totals is not None  # a global aggregate always has one row
            top = candidates.orderBy(*worst_first()).limit(TOP_REDELIVERED).collect()

        with stage(STAGES[4]):
            queue_rows = _queue_rows(queue_minute)
            counts.update(
                jobs=totals["jobs"], queues=len(queue_rows), candidates=totals["candidates"]
            )
            summary = _summary(counts, str(event_dir), out, redelivery_threshold, table_paths)
            shown = queue_rows[:MAX_REPORT_QUEUES]
            data = ReportData(
                summary=summary,
                bucket_s=bucket_s,
                throughput=throughput,
                latency=_latency_rows(job_latency, [q.queue for q in shown]),
                queues=shown,
                queues_total=summary.queues,
                top_redelivered=[_redelivered(row) for row in top],
            )
            write_report(Path(summary.report_path), data)
    finally:
        for frame in cached:
            frame.unpersist()
    return summary


def _summary(
    counts: dict[str, int | None],
    event_dir: str,
    out: Path,
    redelivery_threshold: int,
    table_paths: dict[str, str],
) -> Summary:
    def count(name: str) -> int:
        return count_of(counts, name)

    return Summary(
        event_dir=event_dir,
        out_dir=str(out),
        events=count("lines") - count("malformed_lines"),
        malformed_lines=count("malformed_lines"),
        unknown_events=count("unknown_events"),
        added=count("added"),
        queued=count("queued"),
        delivered=count("delivered"),
        acked=count("acked"),
        nacked=count("nacked"),
        requeued=count("requeued"),
        requeued_without_nack=count("requeued") - count("requeued_after_nack"),
        expired=count("expired"),
        deleted=count("deleted"),
        dead_lettered=count("dead_lettered"),
        evicted=count("evicted"),
        jobs=count("jobs"),
        queues=count("queues"),
        nodes=count("nodes"),
        first_event_ms=count("first_event_ms"),
        last_event_ms=count("last_event_ms"),
        dead_letter_candidates=count("candidates"),
        redelivery_threshold=redelivery_threshold,
        tables=table_paths,
        report_path=str(out / REPORT_FILE),
    )


def count_of(counts: dict[str, int | None], name: str) -> int:
    return int(counts[name] or 0)


def _redelivered(row: Row) -> RedeliveredJob:
    return RedeliveredJob(
        id=row["id"],
        queue=row["queue"] or "",
        redeliveries=row["redeliveries"],
        nacks=row["nacks"],
        additional_deliveries=row["additional_deliveries"],
        deliveries=row["deliveries"],
        dead_lettered=bool(row["dead_lettered"]),
        last_event=row["last_event"] or "",
    )
