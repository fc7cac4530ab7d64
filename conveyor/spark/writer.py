"""The batch and streaming writers: one ADDJOB per row, pipelined per partition.

Each executor task opens one `conveyor.client.Client` and sends its rows in chunks with
`Client.add_jobs` (packed by hand, one write per chunk). Rows carry a `body` (string or
binary) and optionally a `queue`; every job of a write gets the same options. ADDJOB is
not idempotent, so a task Spark retries may add some of its jobs twice: writes are
at-least-once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, StringType, StructType

from conveyor.spark.options import OptionError, WriteOptions


@dataclass
class AddedJobs(WriterCommitMessage):
    partition: int
    count: int


def check_write_schema(schema: StructType, options: WriteOptions) -> None:
    """Fail at planning, not in a task, when the DataFrame cannot be written."""
    fields = {field.name: field for field in schema.fields}
    body = fields.get("body")
    if body is None:
        raise OptionError("writing to conveyor needs a 'body' column (string or binary)")
    if not isinstance(body.dataType, StringType | BinaryType):
        kind = body.dataType.simpleString()
        raise OptionError(f"column 'body' must be string or binary, not {kind}")
    queue = fields.get("queue")
    if queue is not None and not isinstance(queue.dataType, StringType):
        raise OptionError(f"column 'queue' must be a string, not {queue.dataType.simpleString()}")
    if queue is None and options.queue is None:
        raise OptionError("writing to conveyor needs a 'queue' column or option('queue', ...)")


def _partition_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


def _missing(queue: str | None, body: object) -> str:
    """What keeps a row from being a job, or ""."""
    if queue is None:
        return "queue is null"
    if not queue:
        return "queue is empty"
    return "body is null" if body is None else ""


def add_rows(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> AddedJobs:
    from conveyor.client import Client
    from conveyor.client.errors import BatchError, ConveyorError

    partition = _partition_id()
    connection = options.connection
    added = 0
    row = 0  # index within this partition, for error messages
    with Client(
        list(connection.nodes), password=connection.password, socket_timeout=connection.timeout_s
    ) as client:
        for batch in batches:
            bodies: list[Any] = batch.column("body").to_pylist()
            if "queue" in batch.schema.names:
                queues: list[Any] = batch.column("queue").to_pylist()
            else:
                queues = [options.queue] * len(bodies)
            for start in range(0, len(bodies), options.batch_size):
                chunk = range(start, min(start + options.batch_size, len(bodies)))
                by_queue: dict[str, list[int]] = {}
                for index in chunk:
                    queue = queues[index] if queues[index] is not None else options.queue
                    # An empty name is refused by the client too, but without the row.
                    what = _missing(queue, bodies[index])
                    if what:
                        raise ValueError(f"row {row + index} of partition {partition}: {what}")
                    by_queue.setdefault(queue, []).append(index)
                for queue, indexes in by_queue.items():
                    try:
                        client.add_jobs(
                            queue,
                            [bodies[index] for index in indexes],
                            replicate=options.replicate,
                            delay=options.delay,
                            retry=options.retry,
                            ttl=options.ttl,
                            maxlen=options.maxlen,
                            asynchronous=options.asynchronous,
                            timeout_ms=options.timeout_ms,
                        )
                    except BatchError as error:
                        failed = next(
                            i
                            for i, result in enumerate(error.results)
                            if not isinstance(result, str)
                        )
                        raise RuntimeError(
                            f"ADDJOB of row {row + indexes[failed]} of partition {partition} "
                            f"(queue {queue!r}) failed: {error.results[failed]}"
                        ) from None
                    except ConveyorError as error:
                        raise RuntimeError(
                            f"ADDJOB of rows {row + indexes[0]}..{row + indexes[-1]} of "
                            f"partition {partition} (queue {queue!r}) failed: {error}"
                        ) from None
                    added += len(indexes)
            row += len(bodies)
    return AddedJobs(partition, added)


class ConveyorBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AddedJobs:
        return add_rows(self.options, iterator)


class ConveyorStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AddedJobs:
        return add_rows(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: each job exists as soon as its ADDJOB was answered."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo either: jobs added before the failure stay (at-least-once)."""
