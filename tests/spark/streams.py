"""Helpers for the Spark tests: run a streaming query until a condition holds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery


@dataclass
class Collected:
    """What a foreachBatch sink saw: per batch id, the rows' job IDs (in arrival order)."""

    batches: dict[int, list[str]] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ids(self) -> list[str]:
        with self.lock:
            return [job_id for ids in self.batches.values() for job_id in ids]

    def sink(self, fail_at: int | None = None, pause_s: float = 0.0) -> Callable[..., None]:
        def handle(batch: DataFrame, batch_id: int) -> None:
            rows = [row.asDict() for row in batch.collect()]
            with self.lock:
                self.batches[batch_id] = [row["id"] for row in rows]
                self.rows.extend(rows)
            if pause_s:
                time.sleep(pause_s)
            if fail_at is not None and batch_id == fail_at:
                raise RuntimeError(f"sink failing on purpose at batch {batch_id}")

        return handle


def stream_reader(spark: SparkSession, ports: list[int], queues: str, **options: Any) -> DataFrame:
    reader = (
        spark.readStream.format("conveyor")
        .option("nodes", ",".join(f"127.0.0.1:{port}" for port in ports))
        .option("queues", queues)
    )
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def jobs_on_node(client: redis.Redis) -> int:
    """Every job the node still holds, whatever its state."""
    cursor, count = b"0", 0
    while True:
        cursor, ids = client.execute_command("JSCAN", cursor, "COUNT", 1000)
        count += len(ids)
        if cursor in (b"0", 0, "0"):
            return count


def wait_until(
    condition: Callable[[], bool], timeout_s: float, query: StreamingQuery | None = None
) -> bool:
    """Poll `condition` until true or `timeout_s` passes (or the query dies)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        if query is not None and not query.isActive:
            return condition()
        time.sleep(0.2)
    return False


def start(df: DataFrame, collected: Collected, checkpoint: Path, **sink: Any) -> StreamingQuery:
    return (
        df.writeStream.foreachBatch(collected.sink(**sink))
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
