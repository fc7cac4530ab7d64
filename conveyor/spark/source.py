"""`ConveyorDataSource`, format name "conveyor": queues as a Spark source and sink."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from conveyor.spark.options import (
    OptionError,
    parse_read_options,
    parse_write_options,
)
from conveyor.spark.rows import READ_SCHEMA_DDL


class ConveyorDataSource(DataSource):
    """Read jobs from Conveyor (or Disque) queues and write rows to them as jobs.

    Streaming read: `spark.readStream.format("conveyor").option("queues", "q").load()`,
    jobs acked when Spark commits their batch. Batch read: a snapshot without consuming.
    Write (batch or streaming): a `body` column and a `queue` column or option."""

    # How the streaming reader hands rows to executors when option exchange is "auto".
    # "inline" (rows pickled into each partition) works on any cluster; `register()`
    # registers a subclass with "file" when the session runs in local mode.
    default_exchange = "inline"

    @classmethod
    def name(cls) -> str:
        return "conveyor"

    def schema(self) -> str:
        return READ_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        from conveyor.spark.batch_reader import ConveyorBatchReader

        return ConveyorBatchReader(parse_read_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from conveyor.spark.stream_reader import ConveyorStreamReader

        return ConveyorStreamReader(parse_read_options(self.options, self.default_exchange))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from conveyor.spark.writer import ConveyorBatchWriter, check_write_schema

        if overwrite:
            raise OptionError("conveyor queues can only be appended to: use mode('append')")
        options = parse_write_options(self.options)
        check_write_schema(schema, options)
        return ConveyorBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from conveyor.spark.writer import ConveyorStreamWriter, check_write_schema

        options = parse_write_options(self.options)
        check_write_schema(schema, options)
        return ConveyorStreamWriter(options)
