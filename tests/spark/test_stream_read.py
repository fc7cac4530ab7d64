"""The streaming reader against real nodes and a real local[2] Spark session."""

from __future__ import annotations

import collections
import time
from pathlib import Path

import pytest
import redis
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from tests.servers import NodeProcess, running_node
from tests.spark.streams import Collected, jobs_on_node, start, stream_reader, wait_until


def add_jobs(client: redis.Redis, queue: str, count: int, *options: object) -> list[str]:
    pipe = client.pipeline(transaction=False)
    for index in range(count):
        pipe.execute_command("ADDJOB", queue, f"{queue}-{index}", 0, *options)
    return [job_id.decode() for job_id in pipe.execute()]


def test_ten_thousand_jobs_in_batches_of_at_most_1000_all_acked(
    spark: SparkSession, node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    added = add_jobs(r, "q", 10_000)
    collected = Collected()
    df = stream_reader(spark, [node.port], "q", maxJobsPerTrigger=1000)
    query = start(df, collected, tmp_path / "checkpoint")
    try:
        done = wait_until(
            lambda: set(collected.ids()) >= set(added) and jobs_on_node(r) == 0, 120, query
        )
    finally:
        query.stop()
    assert done, f"saw {len(set(collected.ids()))} jobs, node holds {jobs_on_node(r)}"
    sizes = [len(ids) for ids in collected.batches.values()]
    assert max(sizes) <= 1000
    assert sum(sizes) >= 10_000
    assert sorted(set(collected.ids())) == sorted(added)
    assert jobs_on_node(r) == 0
    # The rows carry the jobs as the node delivered them.
    row = next(row for row in collected.rows if row["id"] == added[42])
    assert row["queue"] == "q"
    assert row["body"] == b"q-42"
    assert row["nacks"] == 0
    assert row["additional_deliveries"] == 0
    assert row["node"] == f"127.0.0.1:{node.port}"
    assert row["fetched_at"] is not None


def test_jobs_are_acked_only_after_spark_commits(
    spark: SparkSession, node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    added = add_jobs(r, "q", 50)
    seen_during_batch: list[int] = []
    collected = Collected()
    inner = collected.sink()

    def sink(batch, batch_id):  # type: ignore[no-untyped-def]
        inner(batch, batch_id)
        if batch_id == 0:
            # While the batch runs its jobs are leased (active), not acked.
            seen_during_batch.append(
                sum(
                    r.execute_command("SHOW", job_id) is not None for job_id in collected.batches[0]
                )
            )

    query = (
        stream_reader(spark, [node.port], "q")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        assert wait_until(lambda: jobs_on_node(r) == 0, 60, query)
    finally:
        query.stop()
    assert seen_during_batch == [50]
    assert sorted(collected.ids()) == sorted(added)


def test_query_killed_before_commit_replays_the_batch_exactly(
    spark: SparkSession, node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    added = add_jobs(r, "q", 3000)
    options = {"maxJobsPerTrigger": 500, "journal": str(tmp_path / "journal")}
    first = Collected()
    query = start(
        stream_reader(spark, [node.port], "q", **options),
        first,
        tmp_path / "checkpoint",
        fail_at=2,
    )
    with pytest.raises(StreamingQueryException, match="failing on purpose"):
        query.awaitTermination(120)
    failed_batch = first.batches[2]
    assert len(failed_batch) == 500
    # Nothing of the failed batch was acked: the jobs are still on the node.
    assert all(r.execute_command("SHOW", job_id) is not None for job_id in failed_batch)

    second = Collected()
    query = start(
        stream_reader(spark, [node.port], "q", **options), second, tmp_path / "checkpoint"
    )
    try:
        assert wait_until(
            lambda: set(first.ids()) | set(second.ids()) >= set(added) and jobs_on_node(r) == 0,
            120,
            query,
        )
    finally:
        query.stop()
    # The restarted query first re-runs batch 2 with exactly the same jobs.
    assert second.batches[2] == failed_batch
    assert set(first.ids()) | set(second.ids()) == set(added)
    # Exact replay: apart from the re-run batch, no job reached the sink twice.
    counts = collections.Counter(first.ids() + second.ids())
    assert {job_id for job_id, seen in counts.items() if seen > 1} == set(failed_batch)
    assert jobs_on_node(r) == 0
    assert not list((tmp_path / "journal").rglob("*.arrow"))


def test_without_a_journal_unacked_jobs_come_back_after_retry(
    spark: SparkSession, node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    # RETRY well above a batch's run time, or the node would requeue jobs mid-batch.
    added = add_jobs(r, "q", 400, "RETRY", 8)
    first = Collected()
    query = start(
        stream_reader(spark, [node.port], "q", maxJobsPerTrigger=100, prefetch="false"),
        first,
        tmp_path / "checkpoint",
        fail_at=1,
    )
    with pytest.raises(StreamingQueryException):
        query.awaitTermination(120)
    second = Collected()
    query = start(
        stream_reader(spark, [node.port], "q", maxJobsPerTrigger=100, prefetch="false"),
        second,
        tmp_path / "checkpoint",
    )
    try:
        assert wait_until(lambda: set(second.ids()) >= set(first.batches[1]), 90, query)
        assert wait_until(
            lambda: set(first.ids()) | set(second.ids()) >= set(added) and jobs_on_node(r) == 0,
            60,
            query,
        )
    finally:
        query.stop()
    # The failed batch's jobs were handed out again by the node (RETRY), not replayed.
    redelivered = [row for row in second.rows if row["id"] in set(first.batches[1])]
    assert redelivered and all(row["additional_deliveries"] >= 1 for row in redelivered)


def test_fastack_several_queues_and_rows_pickled_into_partitions(
    spark: SparkSession, node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    added = add_jobs(r, "a", 300) + add_jobs(r, "b", 200)
    collected = Collected()
    query = start(
        stream_reader(
            spark, [node.port], "a,b", ack="fastack", maxJobsPerTrigger=128, exchange="inline"
        ),
        collected,
        tmp_path / "checkpoint",
    )
    try:
        assert wait_until(lambda: jobs_on_node(r) == 0 and len(collected.ids()) >= 500, 60, query)
    finally:
        query.stop()
    assert sorted(collected.ids()) == sorted(added)
    assert {row["queue"] for row in collected.rows} == {"a", "b"}
    assert max(len(ids) for ids in collected.batches.values()) <= 128


def test_partitions_spread_over_several_nodes(
    spark: SparkSession, node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    with running_node(tmp_path / "second") as second:
        r2 = second.client()
        added = add_jobs(r, "q", 300) + add_jobs(r2, "q", 300)
        collected = Collected()
        query = start(
            stream_reader(spark, [node.port, second.port], "q"),
            collected,
            tmp_path / "checkpoint",
        )
        try:
            assert wait_until(lambda: jobs_on_node(r) == 0 and jobs_on_node(r2) == 0, 60, query)
        finally:
            query.stop()
        assert sorted(collected.ids()) == sorted(added)
        by_node = collections.Counter(row["node"] for row in collected.rows)
        assert by_node == {f"127.0.0.1:{node.port}": 300, f"127.0.0.1:{second.port}": 300}


def _stolen_during_slow_batch(
    spark: SparkSession, node: NodeProcess, r: redis.Redis, tmp_path: Path, **options: str
) -> tuple[int, Collected]:
    """Run one 3 s batch of 20 jobs with RETRY 1; halfway through, another consumer asks
    the node for jobs. Returns how many it got."""
    add_jobs(r, "q", 20, "RETRY", 1)
    stolen: list[int] = []
    collected = Collected()
    record = collected.sink()
    other = node.client()

    def slow_sink(batch, batch_id):  # type: ignore[no-untyped-def]
        record(batch, batch_id)
        if batch_id == 0:
            time.sleep(2.0)
            jobs = other.execute_command("GETJOB", "NOHANG", "COUNT", 100, "FROM", "q")
            stolen.append(len(jobs or []))
            if jobs:
                other.execute_command("ACKJOB", *[job[1] for job in jobs])
            time.sleep(1.0)

    query = (
        stream_reader(spark, [node.port], "q", prefetch="false", **options)
        .writeStream.foreachBatch(slow_sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        assert wait_until(lambda: bool(stolen) and jobs_on_node(r) == 0, 60, query)
    finally:
        query.stop()
    return stolen[0], collected


def test_lease_option_keeps_jobs_of_a_slow_batch_from_being_redelivered(
    spark: SparkSession, node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    stolen, collected = _stolen_during_slow_batch(spark, node, r, tmp_path, lease="0.3")
    assert stolen == 0
    assert len(collected.batches[0]) == 20


def test_without_lease_a_slow_batch_is_redelivered(
    spark: SparkSession, node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    """The control for the test above: the same slow batch, no lease."""
    stolen, collected = _stolen_during_slow_batch(spark, node, r, tmp_path)
    assert stolen == 20
    assert len(collected.batches[0]) == 20


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queues": ""}, "option queues is required"),
        ({"queues": "q", "maxJobsPerTrigger": "lots"}, "maxJobsPerTrigger must be an integer"),
        ({"queues": "q", "maxJobsPerTrigger": "0"}, "maxJobsPerTrigger must be >= 1"),
        ({"queues": "q", "ack": "maybe"}, "ack must be ackjob or fastack"),
        ({"queues": "q", "lease": "soon"}, "lease must be a number"),
        ({"queues": "q", "nodes": "host:notaport"}, "option nodes"),
        ({"queues": "q", "exchange": "carrier-pigeon"}, "exchange must be auto, file or inline"),
        ({"queues": "q", "jornal": "/tmp/journal"}, "unknown option jornal"),
        ({"queues": "q", "journal": "/etc/passwd"}, "option journal: cannot use"),
    ],
)
def test_bad_options_fail_the_query_at_start_with_a_clear_error(
    spark: SparkSession, options: dict[str, str], message: str
) -> None:
    reader = spark.readStream.format("conveyor")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=message):
        reader.load().writeStream.format("noop").start().awaitTermination(30)


def test_a_node_that_is_down_does_not_stop_the_query(
    spark: SparkSession, node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    with running_node(tmp_path / "second") as second:
        down_port = second.port
    added = add_jobs(r, "q", 200)
    collected = Collected()
    query = start(
        stream_reader(spark, [down_port, node.port], "q", maxJobsPerTrigger=50, timeoutMs=500),
        collected,
        tmp_path / "checkpoint",
    )
    try:
        assert wait_until(lambda: jobs_on_node(r) == 0, 60, query)
        assert query.isActive
    finally:
        query.stop()
    assert sorted(collected.ids()) == sorted(added)
