"""The batch reader: a snapshot of the jobs in queues, without consuming them.

One partition per (node, queue); each executor pages through the node's jobs with
`JSCAN QUEUE q STATE queued REPLY ALL` (nothing is leased, acked or counted as a
delivery), for inspection and backfills. The snapshot is not atomic: jobs added or taken
while it runs may or may not appear, each at most once per node.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from conveyor.spark import rows
from conveyor.spark.link import NodeError, NodeLink
from conveyor.spark.options import ReadOptions, address_text

SCAN_COUNT = 1000


class ScanPartition(InputPartition):
    def __init__(self, node: tuple[str, int], queue: str) -> None:
        super().__init__((node, queue))
        self.node = node
        self.queue = queue


def _fields(entry: list[Any]) -> dict[bytes, Any]:
    return dict(zip(entry[0::2], entry[1::2], strict=True))


class ConveyorBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        return [
            ScanPartition(node, queue)
            for node in self.options.connection.nodes
            for queue in self.options.queues
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ScanPartition)
        connection = self.options.connection
        link = NodeLink(partition.node, connection.password, connection.timeout_s)
        name = address_text(partition.node)
        state_filter = () if self.options.state == "any" else ("STATE", self.options.state)
        cursor: Any = b"0"
        try:
            while True:
                reply = link.call(
                    "JSCAN",
                    cursor,
                    "COUNT",
                    SCAN_COUNT,
                    "QUEUE",
                    partition.queue,
                    *state_filter,
                    "REPLY",
                    "ALL",
                )
                cursor, entries = reply[0], reply[1]
                fetched_at = time.time_ns() // 1000
                batch = []
                for entry in entries:
                    job = _fields(entry)
                    batch.append(
                        (
                            job[b"queue"].decode("utf-8", "replace"),
                            job[b"id"].decode("ascii", "replace"),
                            job[b"body"],
                            int(job[b"nacks"]),
                            int(job[b"additional-deliveries"]),
                            name,
                            fetched_at,
                        )
                    )
                if batch:
                    yield rows.rows_batch(batch)
                if cursor in (b"0", 0, "0"):
                    return
        except NodeError as error:
            message = f"batch read of queue {partition.queue!r} from {name}: {error}"
            raise RuntimeError(message) from None
        finally:
            link.close()
