"""The streaming reader: leases jobs with GETJOB, acknowledges them in `commit()`.

Where each part runs (PySpark's Python data sources): `initialOffset`, `latestOffset`,
`partitions` and `commit` run in one long-lived Python process beside the driver, which
is where the leases, the journal and the background threads live (`leases.DriverState`,
created on first use and never pickled). `read()` runs on executors against a pickled
copy of this object and a partition that carries its own rows, so it touches no node.

Offsets are `{"run": <name of this query's journal>, "seq": <batch number>}`: batch `seq`
is the set of jobs leased for it. Delivery is at-least-once: jobs are acked only once
Spark has committed the batch that holds them; a driver that dies before that leaves
them leased, and the node's RETRY hands them out again (or the journal replays them
exactly on restart, see `journal.py`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from conveyor.spark import rows
from conveyor.spark.leases import DriverState
from conveyor.spark.options import ALL_AVAILABLE_CAP, ReadOptions

log = logging.getLogger("conveyor.spark")


class SpoolPartition(InputPartition):
    """A partition whose rows wait in a file the driver wrote (option exchange=file).

    Pickling 10-20 MB of rows per partition through the JVM costs Spark about as much as
    the rest of the batch; in local mode the executors can simply read a file."""

    def __init__(self, path: str) -> None:
        super().__init__(path)

    def load(self) -> bytes:
        try:
            with open(self.value, "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            raise RuntimeError(
                f"conveyor: partition file {self.value} is not visible on this executor; "
                "use option exchange=inline when executors do not share the driver's "
                "filesystem"
            ) from None


def offset(run: str, seq: int) -> dict[str, Any]:
    # Spark compares offsets as JSON strings: always the same keys in the same order.
    return {"run": run, "seq": seq}


class ConveyorStreamReader(DataSourceStreamReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._driver: DriverState | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get this object pickled: the driver-side state (sockets, threads,
        # locks) stays behind.
        state = dict(self.__dict__)
        state["_driver"] = None
        return state

    def _state(self, start: dict[str, Any]) -> DriverState:
        if self._driver is None or self._driver.run != start["run"]:
            if self._driver is not None:
                self._driver.stop()
            self._driver = DriverState(self.options, str(start["run"]))
        return self._driver

    def initialOffset(self) -> dict[str, Any]:
        return offset(uuid.uuid4().hex[:16], 0)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_jobs_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(max_rows=self.options.max_jobs_per_trigger)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        state = self._state(start)
        seq = int(start["seq"])
        # ReadAllAvailable (and any other limit) still leases at most the safety cap.
        max_rows = ALL_AVAILABLE_CAP
        if isinstance(limit, ReadMaxRows):
            max_rows = max(1, min(int(limit.max_rows), ALL_AVAILABLE_CAP))
        batch = state.take(seq + 1, max_rows)
        if batch.rows:
            state.prefetch(seq + 2, max_rows)
            return offset(state.run, seq + 1)
        if state.holds_uncommitted_rows(seq):
            # Spark commits batch `seq` only when it plans a later one: an empty batch
            # gets the last jobs acked while the queues stay empty.
            return offset(state.run, seq + 1)
        with state.lock:
            state.pending.pop(seq + 1, None)
        return start

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        state = self._state(end)
        parts: list[InputPartition] = []
        for seq in range(int(start["seq"]) + 1, int(end["seq"]) + 1):
            batch = state.batch_for_replay(seq)
            if batch is None:
                if state.journal is None:
                    log.warning(
                        "batch %d cannot be replayed (no journal option): its jobs go back "
                        "to their queues when their RETRY elapses",
                        seq,
                    )
                continue
            total = batch.rows
            for node_batches in batch.batches_by_node.values():
                node_rows = sum(b.num_rows for b in node_batches)
                share = max(1, round(self.options.num_partitions * node_rows / total))
                for group in rows.group(node_batches, share):
                    payload = rows.to_ipc(group)
                    if self.options.exchange == "file":
                        parts.append(SpoolPartition(state.spool(seq, len(parts), payload)))
                    else:
                        parts.append(InputPartition(payload))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, SpoolPartition):
            return rows.from_ipc(partition.load())
        return rows.from_ipc(partition.value)

    def commit(self, end: dict[str, Any]) -> None:
        try:
            self._state(end).commit(int(end["seq"]))
        except Exception as error:  # an exception here would kill the query
            log.warning("commit of batch %s failed (will retry): %s", end.get("seq"), error)

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.stop()
            self._driver = None
