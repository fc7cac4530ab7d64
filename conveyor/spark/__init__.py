"""Spark pipelines on Conveyor: the `conveyor` PySpark data source and the event analytics.

Owns everything that imports pyspark; nothing else in the package may. Importing this
package is cheap: pyspark loads only when `ConveyorDataSource` or `register` is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from conveyor.spark.source import ConveyorDataSource

__all__ = ["ConveyorDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Make `format("conveyor")` available in `spark`.

    In local mode the executors share the driver's filesystem, so the streaming reader
    can hand each partition's rows over as a spool file instead of pickling them through
    the JVM (about twice as fast per batch). The class registered then is a subclass made
    here: cloudpickle ships it by value, setting included."""
    from conveyor.spark.source import ConveyorDataSource

    if spark.sparkContext.master.startswith("local"):

        class LocalConveyorDataSource(ConveyorDataSource):
            default_exchange = "file"

        spark.dataSource.register(LocalConveyorDataSource)
    else:
        spark.dataSource.register(ConveyorDataSource)


def __getattr__(name: str) -> Any:
    if name == "ConveyorDataSource":
        from conveyor.spark.source import ConveyorDataSource

        return ConveyorDataSource
    raise AttributeError(name)
