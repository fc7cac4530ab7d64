"""The job-event log as Spark tables: reading it, and the three tables `conveyor analyze`
writes (`queue_minute`, `job_latency`, `dead_letter_candidates`).

Owns the log's schema as Spark reads it (a line that does not fit is flagged, not
dropped), what each table's columns mean and how they are computed. Writing them, the
report and its aggregates are `conveyor.spark.analyze`; what reaches the driver from here
is a single row or a count.
"""

from __future__ import annotations

import operator
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, VariantType

# In lifecycle order: also the tie-break for "last event" when two share a millisecond.
EVENT_TYPES: tuple[str, ...] = (
    "added",
    "imported",
    "replicated",  # a cluster's job reached its replication level (added in wait-repl)
    "queued",
    "delivered",
    "dequeued",
    "nacked",
    "requeued",
    "acked",
    "expired",
    "deleted",
    "dead-lettered",
    "evicted",
)

EVENT_SCHEMA = StructType(
    [
        StructField("time_ms", LongType()),
        StructField("node", StringType()),
        StructField("event", StringType()),
        StructField("id", StringType()),
        StructField("queue", StringType()),
        StructField("nacks", LongType()),
        StructField("additional_deliveries", LongType()),
    ]
)

_CORRUPT = "_corrupt_record"

# Read as variants first: Spark turns any JSON value into a STRING column's text (`"id": 42`
# would be the id "42", `"event": {}` an unknown event), so only a variant shows the type.
_TEXT_FIELDS = ("node", "event", "id", "queue")
# Beyond these, one line would stop the whole job: timestamp_millis and nacks +
# additional_deliveries overflow (ANSI mode), the report cannot show a date after 9999.
_MAX_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
_MAX_COUNTER = 2**62 - 1

# queue_minute column -> the event it counts.
QUEUE_MINUTE_COUNTS: dict[str, str] = {
    "jobs_in": "added",
    "jobs_out": "delivered",
    "acks": "acked",
    "nacks": "nacked",
    "requeues": "requeued",
    "expiries": "expired",
    "deletes": "deleted",
    "dead_letters": "dead-lettered",
    "evictions": "evicted",
}


def event_is(name: str) -> Column:
    return F.col("event") == F.lit(name)


def _parse_schema() -> StructType:
    fields = [
        StructField(f.name, VariantType()) if f.name in _TEXT_FIELDS else f
        for f in EVENT_SCHEMA.fields
    ]
    return StructType([*fields, StructField(_CORRUPT, StringType())])


def _is_text(name: str) -> Column:
    return F.col(name).isNull() | F.schema_of_variant(name).isin("STRING", "VOID")


def _within(name: str, low: int, high: int) -> Column:
    return F.col(name).isNull() | F.col(name).between(low, high)


def read_events(spark: SparkSession, uri: str) -> DataFrame:
    """Every line of every *.jsonl file under `uri`, flagged `malformed` rather than dropped.

    Lines are read as text and parsed one by one: Spark's JSON reader would make one row of
    each object of a line holding an array, and no row at all of `[]`. Blank lines are
    skipped and counted nowhere.
    """
    text = (
        spark.read.option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.jsonl")
        .text(uri)
    )
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    parsed = (
        text.where(~F.col("value").rlike(r"^\s*$"))
        .select(F.from_json("value", _parse_schema(), options).alias("line"))
        .select("line.*")
    )
    all_text = reduce(operator.and_, [_is_text(name) for name in _TEXT_FIELDS])
    checked = parsed.select(
        *[
            F.col(f.name).cast(StringType()).alias(f.name) if f.name in _TEXT_FIELDS else f.name
            for f in EVENT_SCHEMA.fields
        ],
        (F.col(_CORRUPT).isNotNull() | ~all_text).alias("bad"),
    )
    malformed = (
        F.col("bad")
        | F.col("time_ms").isNull()
        | F.col("event").isNull()
        | F.col("id").isNull()
        | ~F.col("time_ms").between(0, _MAX_TIME_MS)
        | ~_within("nacks", 0, _MAX_COUNTER)
        | ~_within("additional_deliveries", 0, _MAX_COUNTER)
    )
    return checked.select(
        *[F.col(f.name) for f in EVENT_SCHEMA.fields],
        # Only for lines that pass: a time_ms out of range would overflow here.
        F.when(~malformed, F.timestamp_millis("time_ms")).alias("ts"),
        malformed.alias("malformed"),
    )


def summary_row(lines: DataFrame) -> dict[str, int | None]:
    ok = ~F.col("malformed")
    known = F.col("event").isin(*EVENT_TYPES)
    aggregates = [
        F.count(F.lit(1)).alias("lines"),
        F.count_if(F.col("malformed")).alias("malformed_lines"),
        F.count_if(ok & ~known).alias("unknown_events"),
        *[F.count_if(ok & event_is(name)).alias(name.replace("-", "_")) for name in EVENT_TYPES],
        # Jobs and queues are counted from the derived tables. A set of node ids stays tiny,
        # and unlike a distinct count it needs no second shuffle.
        F.size(F.collect_set(F.when(ok, F.col("node")))).alias("nodes"),
        F.min(F.when(ok, F.col("time_ms"))).alias("first_event_ms"),
        F.max(F.when(ok, F.col("time_ms"))).alias("last_event_ms"),
    ]
    row = lines.agg(*aggregates).first()
    assert row is not None  # a global aggregate always has one row
    return row.asDict()


def requeued_after_nack(events: DataFrame) -> int:
    """ "requeued" lines that put a NACKed job back: the node logs a NACK as "nacked", then
    (at once, or after NACK's DELAY) a "requeued" with the same counters. Every other
    requeue (RETRY timeout, ENQUEUE) adds one to additional_deliveries, and each NACK to
    nacks, so no other "requeued" of the job carries the counters of one of its "nacked"."""
    keys = ["id", "nacks", "additional_deliveries"]
    nacked = events.where(event_is("nacked")).select(*keys).distinct()
    return events.where(event_is("requeued")).join(nacked, keys, "left_semi").count()


def queue_minute_table(events: DataFrame) -> DataFrame:
    """Per queue and UTC minute: one count column per event kind."""
    return events.groupBy("queue", F.date_trunc("minute", F.col("ts")).alias("minute")).agg(
        *[F.count_if(event_is(event)).alias(name) for name, event in QUEUE_MINUTE_COUNTS.items()]
    )


def job_latency_table(events: DataFrame) -> DataFrame:
    """One row per job id, with its timings and its highest redelivery counters."""
    rank = F.array_position(F.array(*[F.lit(name) for name in EVENT_TYPES]), F.col("event"))

    def first_ms(event: str) -> Column:
        return F.min(F.when(event_is(event), F.col("time_ms")))

    per_job = events.groupBy("id").agg(
        # The queue the job was added to: a dead-lettered job's later events name the
        # dead-letter queue. Jobs whose "added" fell outside the log take their first queue.
        F.coalesce(
            F.min_by(F.when(event_is("added"), F.col("queue")), F.col("time_ms")),
            F.min_by("queue", F.col("time_ms")),
        ).alias("queue"),
        first_ms("added").alias("added_ms"),
        first_ms("delivered").alias("delivered_ms"),
        first_ms("acked").alias("acked_ms"),
        F.count_if(event_is("delivered")).alias("deliveries"),
        F.coalesce(F.max("nacks"), F.lit(0)).alias("nacks"),
        F.coalesce(F.max("additional_deliveries"), F.lit(0)).alias("additional_deliveries"),
        F.bool_or(event_is("dead-lettered")).alias("dead_lettered"),
        F.max_by("event", F.struct(F.col("time_ms"), rank)).alias("last_event"),
        F.max("time_ms").alias("last_event_ms"),
    )
    return per_job.select(
        "id",
        "queue",
        F.timestamp_millis("added_ms").alias("added_at"),
        F.timestamp_millis("delivered_ms").alias("first_delivered_at"),
        F.timestamp_millis("acked_ms").alias("acked_at"),
        (F.col("delivered_ms") - F.col("added_ms")).alias("wait_ms"),
        (F.col("acked_ms") - F.col("added_ms")).alias("ack_ms"),
        F.col("deliveries").cast("long").alias("deliveries"),
        "nacks",
        "additional_deliveries",
        "dead_lettered",
        "last_event",
        F.timestamp_millis("last_event_ms").alias("last_event_at"),
    )


def _redeliveries() -> Column:
    return F.col("nacks") + F.col("additional_deliveries")


def is_candidate(redelivery_threshold: int) -> Column:
    return (_redeliveries() >= redelivery_threshold) | F.col("dead_lettered")


def candidates_table(job_latency: DataFrame, redelivery_threshold: int) -> DataFrame:
    """Jobs redelivered at least `redelivery_threshold` times, and every dead-lettered job."""
    return job_latency.where(is_candidate(redelivery_threshold)).select(
        "id",
        "queue",
        _redeliveries().alias("redeliveries"),
        "nacks",
        "additional_deliveries",
        "deliveries",
        "dead_lettered",
        "last_event",
        "added_at",
        "last_event_at",
    )


def worst_first() -> list[Column]:
    # A function, not a constant: Columns need an active SparkContext to exist.
    return [F.desc("redeliveries"), F.desc("dead_lettered"), F.asc("id")]
