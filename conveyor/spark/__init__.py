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
    """Make `format("conveyor")` available in `spark`."""
    from conveyor.spark.source import ConveyorDataSource

    spark.dataSource.register(ConveyorDataSource)


def __getattr__(name: str) -> Any:
    if name == "ConveyorDataSource":
        from conveyor.spark.source import ConveyorDataSource

        return ConveyorDataSource
    raise AttributeError(name)
