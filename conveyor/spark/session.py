"""A local SparkSession set up the way Conveyor's jobs, tests and benchmarks need it.

Owns only session construction; the data source and the analytics job take any session.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def python_for_workers() -> None:
    """Make Spark's Python workers run this interpreter.

    Spark starts its workers with `python3` from PATH, not `sys.executable`: from a venv
    that is not activated (as under `make test`) they would start a Python without pyarrow
    or this package ("Python worker failed to connect back").
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def local_session(
    master: str = "local[2]",
    app_name: str = "conveyor",
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """A SparkSession on `master`, bound to 127.0.0.1, quiet, with the UI off."""
    python_for_workers()
    if master.startswith("local"):
        # Keep the driver's own sockets on loopback; a cluster master needs the real host.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
    )
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
