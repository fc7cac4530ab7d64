"""The batch reader and the batch and streaming writers, on a real node and local[2] Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.sql import SparkSession

from tests.servers import NodeProcess
from tests.spark.streams import jobs_on_node, stream_reader, wait_until


def show(client: redis.Redis, job_id: str | bytes) -> dict[str, Any]:
    reply = client.execute_command("SHOW", job_id)
    assert reply is not None, f"no job {job_id!r}"
    fields = dict(zip(reply[0::2], reply[1::2], strict=True))
    return {key.decode(): value for key, value in fields.items()}


def all_jobs(client: redis.Redis, queue: str) -> list[dict[str, Any]]:
    cursor: Any = b"0"
    jobs: list[dict[str, Any]] = []
    while True:
        cursor, ids = client.execute_command("JSCAN", cursor, "COUNT", 1000, "QUEUE", queue)
        for job_id in ids:
            # A running stream may ack a job between the scan and its SHOW.
            reply = client.execute_command("SHOW", job_id)
            if reply is not None:
                fields = dict(zip(reply[0::2], reply[1::2], strict=True))
                jobs.append({key.decode(): value for key, value in fields.items()})
        if cursor in (b"0", 0, "0"):
            return jobs


def batch_reader(spark: SparkSession, node: NodeProcess, queues: str, **options: Any) -> Any:
    reader = (
        spark.read.format("conveyor")
        .option("nodes", f"127.0.0.1:{node.port}")
        .option("queues", queues)
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


# -- batch read ------------------------------------------------------------------------
def test_batch_read_returns_queued_jobs_without_consuming_them(
    spark: SparkSession, node: NodeProcess, r: redis.Redis
) -> None:
    queued = {r.execute_command("ADDJOB", "a", f"a{i}", 0).decode(): f"a{i}" for i in range(30)}
    queued |= {r.execute_command("ADDJOB", "b", f"b{i}", 0).decode(): f"b{i}" for i in range(20)}
    r.execute_command("ADDJOB", "other", "not read", 0)
    # A job taken by a consumer is not queued any more: the default snapshot skips it.
    taken = r.execute_command("GETJOB", "COUNT", 1, "FROM", "a")[0][1].decode()
    del queued[taken]
    # Counters come through as the node has them.
    nacked = r.execute_command("GETJOB", "COUNT", 1, "FROM", "b")[0][1]
    r.execute_command("NACK", nacked)

    rows = [row.asDict() for row in batch_reader(spark, node, "a,b").collect()]

    assert {row["id"]: row["body"].decode() for row in rows} == queued
    assert {row["queue"] for row in rows} == {"a", "b"}
    assert next(row for row in rows if row["id"] == nacked.decode())["nacks"] == 1
    assert {row["node"] for row in rows} == {f"127.0.0.1:{node.port}"}
    # Nothing was consumed or counted as a delivery.
    assert r.execute_command("QLEN", "a") == 29
    assert r.execute_command("QLEN", "b") == 20
    assert all(job["additional-deliveries"] == 0 for job in all_jobs(r, "a"))
    assert show(r, taken)["state"] == b"active"


def test_batch_read_state_any_includes_jobs_in_flight(
    spark: SparkSession, node: NodeProcess, r: redis.Redis
) -> None:
    ids = {r.execute_command("ADDJOB", "q", f"j{i}", 0).decode() for i in range(5)}
    r.execute_command("GETJOB", "COUNT", 2, "FROM", "q")
    assert batch_reader(spark, node, "q").count() == 3
    rows = batch_reader(spark, node, "q", state="any").collect()
    assert {row["id"] for row in rows} == ids


def test_batch_read_of_a_large_queue_pages_through_it(
    spark: SparkSession, node: NodeProcess, r: redis.Redis
) -> None:
    pipe = r.pipeline(transaction=False)
    for index in range(2500):
        pipe.execute_command("ADDJOB", "big", f"{index}", 0)
    ids = {job_id.decode() for job_id in pipe.execute()}
    rows = batch_reader(spark, node, "big").select("id").collect()
    assert len(rows) == 2500
    assert {row["id"] for row in rows} == ids


def test_batch_read_bad_state_is_a_clear_error(spark: SparkSession, node: NodeProcess) -> None:
    with pytest.raises(Exception, match="option state must be one of"):
        batch_reader(spark, node, "q", state="sleeping").collect()


# -- batch write -----------------------------------------------------------------------
def test_batch_write_adds_each_row_with_the_options(
    spark: SparkSession, node: NodeProcess, r: redis.Redis
) -> None:
    df = spark.createDataFrame([(f"body-{i}",) for i in range(200)], "body string")
    (
        df.repartition(3)
        .write.format("conveyor")
        .option("nodes", f"127.0.0.1:{node.port}")
        .option("queue", "out")
        .option("retry", 17)
        .option("ttl", 3600)
        .option("maxlen", 1000)
        .mode("append")
        .save()
    )
    jobs = all_jobs(r, "out")
    assert sorted(job["body"].decode() for job in jobs) == sorted(f"body-{i}" for i in range(200))
    assert {job["retry"] for job in jobs} == {17}
    assert {job["queue"] for job in jobs} == {b"out"}
    assert all(3590 <= job["ttl"] <= 3600 for job in jobs)
    assert {job["state"] for job in jobs} == {b"queued"}


def test_batch_write_queue_column_binary_bodies_and_delay(
    spark: SparkSession, node: NodeProcess, r: redis.Redis
) -> None:
    rows = [(b"\x00\xffbin", "x"), (b"plain", "y"), (b"\r\n", "x")]
    df = spark.createDataFrame(rows, "body binary, queue string")
    (
        df.write.format("conveyor")
        .option("nodes", f"127.0.0.1:{node.port}")
        .option("delay", 60)
        .option("async", "true")
        .mode("append")
        .save()
    )
    x_jobs = all_jobs(r, "x")
    assert sorted(job["body"] for job in x_jobs) == sorted([b"\x00\xffbin", b"\r\n"])
    assert [job["body"] for job in all_jobs(r, "y")] == [b"plain"]
    # Delayed: not queued yet.
    assert r.execute_command("QLEN", "x") == 0
    assert all(job["delay"] == 60 for job in x_jobs)


@pytest.mark.parametrize(
    ("ddl", "rows", "options", "message"),
    [
        ("text string", [("a",)], {"queue": "q"}, "needs a 'body' column"),
        ("body int", [(1,)], {"queue": "q"}, "column 'body' must be string or binary"),
        ("body string", [("a",)], {}, "needs a 'queue' column or option"),
        ("body string", [("a",)], {"queue": "q", "retry": "soon"}, "retry must be an integer"),
        ("body string", [("a",)], {"queue": "q", "queues": "r"}, "unknown option queues"),
    ],
)
def test_batch_write_rejects_bad_frames_and_options_before_adding_anything(
    spark: SparkSession,
    node: NodeProcess,
    r: redis.Redis,
    ddl: str,
    rows: list[tuple[Any, ...]],
    options: dict[str, str],
    message: str,
) -> None:
    writer = spark.createDataFrame(rows, ddl).write.format("conveyor").mode("append")
    writer = writer.option("nodes", f"127.0.0.1:{node.port}")
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=message):
        writer.save()
    assert jobs_on_node(r) == 0


def test_batch_write_overwrite_mode_is_refused(
    spark: SparkSession, node: NodeProcess, r: redis.Redis
) -> None:
    df = spark.createDataFrame([("a",)], "body string")
    with pytest.raises(Exception, match="can only be appended to"):
        df.write.format("conveyor").option("queue", "q").option(
            "nodes", f"127.0.0.1:{node.port}"
        ).mode("overwrite").save()
    assert jobs_on_node(r) == 0


def test_a_failing_addjob_fails_the_task_naming_the_row(
    spark: SparkSession, node: NodeProcess, r: redis.Redis
) -> None:
    r.execute_command("PAUSE", "paused", "in")
    df = spark.createDataFrame([("fine", "ok"), ("refused", "paused")], "body string, queue string")
    with pytest.raises(Exception, match=r"ADDJOB of row 1 of partition 0 \(queue 'paused'\)"):
        df.coalesce(1).write.format("conveyor").option("nodes", f"127.0.0.1:{node.port}").mode(
            "append"
        ).save()
    assert r.execute_command("QLEN", "paused") == 0


def test_a_null_body_fails_the_task_naming_the_row(
    spark: SparkSession, node: NodeProcess, r: redis.Redis
) -> None:
    df = spark.createDataFrame([("a",), (None,)], "body string")
    with pytest.raises(Exception, match="row 1 of partition 0: body is null"):
        df.coalesce(1).write.format("conveyor").option("queue", "q").option(
            "nodes", f"127.0.0.1:{node.port}"
        ).mode("append").save()


def test_an_empty_queue_name_fails_the_task_naming_the_row(
    spark: SparkSession, node: NodeProcess, r: redis.Redis
) -> None:
    df = spark.createDataFrame([("a", "q"), ("b", "")], "body string, queue string")
    with pytest.raises(Exception, match="row 1 of partition 0: queue is empty"):
        df.coalesce(1).write.format("conveyor").option("nodes", f"127.0.0.1:{node.port}").mode(
            "append"
        ).save()


# -- streaming write -------------------------------------------------------------------
def test_stream_from_one_queue_to_another_with_options(
    spark: SparkSession, node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    pipe = r.pipeline(transaction=False)
    for index in range(500):
        pipe.execute_command("ADDJOB", "in", f"{index}", 0)
    pipe.execute()
    source = stream_reader(spark, [node.port], "in", maxJobsPerTrigger=200)
    doubled = source.select(
        (F.col("body").cast("string").cast("int") * 2).cast("string").alias("body")
    )
    query = (
        doubled.writeStream.format("conveyor")
        .option("nodes", f"127.0.0.1:{node.port}")
        .option("queue", "out")
        .option("retry", 42)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        assert wait_until(
            lambda: (
                r.execute_command("QLEN", "out") >= 500
                and r.execute_command("QLEN", "in") == 0
                and len(all_jobs(r, "in")) == 0
            ),
            90,
            query,
        )
    finally:
        query.stop()
    jobs = all_jobs(r, "out")
    assert sorted(int(job["body"]) for job in jobs) == [2 * i for i in range(500)]
    assert {job["retry"] for job in jobs} == {42}
