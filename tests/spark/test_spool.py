"""The streaming reader's spool of partition files stays bounded in a long-running query."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
import redis
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from conveyor.spark.spool import Spool
from tests.servers import NodeProcess
from tests.spark.streams import Collected, jobs_on_node, start, stream_reader, wait_until
from tests.spark.test_stream_read import add_jobs


def run_of(checkpoint: Path) -> str:
    """The reader's run name, from the first offset the query logged."""
    last_line = (checkpoint / "offsets" / "0").read_text().splitlines()[-1]
    return str(json.loads(last_line)["run"])


def spool_files(spark: SparkSession, run: str) -> list[Path]:
    """Every spool file of `run`, in whichever local directory the driver's Python used."""
    roots = {
        *filter(None, os.environ.get("SPARK_LOCAL_DIRS", "").split(",")),
        spark.conf.get("spark.local.dir", None) or "",
        spark.sparkContext._jvm.java.lang.System.getProperty("java.io.tmpdir"),  # type: ignore[union-attr]
        tempfile.gettempdir(),
    }
    found: set[Path] = set()
    for root in filter(None, roots):
        for pattern in (f"conveyor-{run}-*/*", f"*/conveyor-{run}-*/*"):
            found.update(Path(root).glob(pattern))
    return sorted(found)


def test_a_restarted_query_removes_the_spool_files_its_failed_predecessor_left(
    spark: SparkSession, node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    added = add_jobs(r, "q", 20)
    options = {"maxJobsPerTrigger": 10, "journal": str(tmp_path / "journal")}
    checkpoint = tmp_path / "checkpoint"
    first = Collected()
    query = start(stream_reader(spark, [node.port], "q", **options), first, checkpoint, fail_at=1)
    with pytest.raises(StreamingQueryException, match="failing on purpose"):
        query.awaitTermination(60)
    run = run_of(checkpoint)
    # The failed batch's files are still there: Spark never committed it.
    assert spool_files(spark, run)

    second = Collected()
    query = start(stream_reader(spark, [node.port], "q", **options), second, checkpoint)
    try:
        assert wait_until(lambda: jobs_on_node(r) == 0, 60, query)
    finally:
        query.stop()
    assert set(first.ids()) | set(second.ids()) == set(added)
    # Every batch is committed (its jobs acked): none of them keeps a file, the failed
    # run's included.
    assert spool_files(spark, run) == []


def test_a_committed_batch_loses_its_spool_files_while_its_acks_fail(
    spark: SparkSession, node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    add_jobs(r, "q", 20)
    collected = Collected()
    record = collected.sink()

    def sink_that_stops_the_node(batch, batch_id):  # type: ignore[no-untyped-def]
        record(batch, batch_id)
        if batch_id == 0:
            node.stop()  # the batch's acks now fail (and are retried) for as long as it is down

    checkpoint = tmp_path / "checkpoint"
    query = (
        stream_reader(spark, [node.port], "q", timeoutMs=500)
        .writeStream.foreachBatch(sink_that_stops_the_node)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        # Batch 1 is the empty batch that gets batch 0 committed.
        assert wait_until(lambda: (query.lastProgress or {}).get("batchId", -1) >= 1, 60, query)
        run = run_of(checkpoint)
        assert wait_until(lambda: not spool_files(spark, run), 20, query), spool_files(spark, run)
    finally:
        query.stop()
    assert len(collected.batches[0]) == 20


def test_spool_drops_committed_batches_and_a_predecessors_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    other_run = Spool("run2")
    other_run.write(1, 0, b"rows")
    earlier = Spool("run1")
    earlier.write(3, 0, b"rows")
    spool = Spool("run1")
    for seq in (4, 5, 6):
        spool.write(seq, 0, b"rows")
        spool.write(seq, 1, b"rows")
    assert not earlier.batches()  # a new driver process of the run removed them
    assert other_run.batches() == {1}
    spool.drop_through(5)
    assert spool.batches() == {6}
    spool.remove()
    assert [path.name for path in tmp_path.iterdir()] == [other_run.directory.name]
