"""A streaming pipeline: jobs from one queue → transform → another queue and Parquet.

Each job on the source queue carries a JSON order, `{"order": 17, "items": [...]}`. The
pipeline totals each order and, per micro-batch, writes the results both as jobs on the
result queue and as rows of a Parquet table. A batch's source jobs are acknowledged only
after both writes succeeded (the source acks on Spark's commit), so a crash anywhere
means the batch runs again: at-least-once into both sinks.

    .venv/bin/python examples/spark_pipeline.py --seed 1000 --until-empty
    .venv/bin/python examples/spark_pipeline.py --nodes 127.0.0.1:7711 \\
        --source orders --sink totals --parquet ./data/totals --checkpoint ./data/ckpt

`--seed N` first adds N demo orders; `--until-empty` stops once the source queue is
drained and every job is acked (without it the query runs until interrupted).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DoubleType, LongType, StructField, StructType

ORDER = StructType(
    [
        StructField("order", LongType()),
        StructField(
            "items",
            ArrayType(
                StructType([StructField("sku", LongType()), StructField("price", DoubleType())])
            ),
        ),
    ]
)


def seed_orders(nodes: str, queue: str, count: int) -> None:
    from conveyor.client import Client

    rng = random.Random(7)
    bodies = [
        json.dumps(
            {
                "order": number,
                "items": [
                    {"sku": rng.randrange(1000), "price": round(rng.uniform(1, 50), 2)}
                    for _ in range(rng.randrange(1, 5))
                ],
            }
        )
        for number in range(count)
    ]
    with Client(nodes) as client:
        client.add_jobs(queue, bodies)


def totals(jobs: DataFrame) -> DataFrame:
    """The transform: parse each order and total its items."""
    orders = jobs.select(
        F.from_json(F.col("body").cast("string"), ORDER).alias("o"), F.col("id").alias("job")
    )
    return orders.select(
        F.col("o.order").alias("order"),
        F.size("o.items").alias("items"),
        F.round(F.aggregate("o.items", F.lit(0.0), lambda acc, x: acc + x.price), 2).alias("total"),
        F.col("job"),
    )


def start_pipeline(
    spark: SparkSession,
    nodes: str,
    source: str,
    sink: str,
    parquet: Path,
    checkpoint: Path,
    max_jobs: int = 10_000,
) -> Any:
    """Start the streaming query; returns it (a pyspark StreamingQuery)."""
    from conveyor.spark import register

    register(spark)
    jobs = (
        spark.readStream.format("conveyor")
        .option("nodes", nodes)
        .option("queues", source)
        .option("maxJobsPerTrigger", max_jobs)
        .option("journal", str(checkpoint / "conveyor-journal"))
        .load()
    )

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            batch.write.mode("append").parquet(str(parquet))
            (
                batch.select(F.to_json(F.struct("order", "items", "total")).alias("body"))
                .write.format("conveyor")
                .option("nodes", nodes)
                .option("queue", sink)
                .mode("append")
                .save()
            )
        finally:
            batch.unpersist()

    return (
        totals(jobs)
        .writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", str(checkpoint / "query"))
        .start()
    )


def queue_drained(nodes: str, queue: str) -> bool:
    """No job of `queue` left on the node: none queued, none leased and not yet acked."""
    from conveyor.client import Client

    with Client(nodes) as client:
        return next(iter(client.scan_jobs(queue=queue)), None) is None


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Read JSON orders from a Conveyor queue, total each one with Spark, and "
        "write the totals to another queue and to a Parquet table (at-least-once).",
    )
    parser.add_argument(
        "--nodes",
        default="127.0.0.1:7711",
        help="Conveyor nodes to read from and write to, comma-separated host:port "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--source", default="orders", help="queue the orders are read from (default: %(default)s)"
    )
    parser.add_argument(
        "--sink", default="totals", help="queue the totals are added to (default: %(default)s)"
    )
    parser.add_argument(
        "--parquet",
        type=Path,
        default=Path("data/totals"),
        help="directory of the Parquet table the totals are appended to (default: %(default)s)",
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=Path("data/pipeline-checkpoint"),
        help="directory for Spark's checkpoint and the source's lease journal; keep it between "
        "runs so a restarted pipeline replays its last batch exactly (default: %(default)s)",
    )
    parser.add_argument(
        "--max-jobs",
        type=int,
        default=10_000,
        help="at most this many jobs per micro-batch, the source's maxJobsPerTrigger "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--master",
        default="local[2]",
        help="Spark master URL, e.g. local[4] or spark://host:7077 (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="N",
        help="first add N demo orders to the source queue (default: %(default)s)",
    )
    parser.add_argument(
        "--until-empty",
        action="store_true",
        help="stop once the source queue is drained and every job is acked (without it: run "
        "until interrupted)",
    )
    args = parser.parse_args()

    from conveyor.spark.session import local_session

    if args.seed:
        seed_orders(args.nodes, args.source, args.seed)
    spark = local_session(args.master, app_name="conveyor-pipeline")
    query = start_pipeline(
        spark, args.nodes, args.source, args.sink, args.parquet, args.checkpoint, args.max_jobs
    )
    try:
        while query.isActive:
            if args.until_empty and queue_drained(args.nodes, args.source):
                # A batch may still be writing: stopping it now aborts its write (Spark
                # logs the interrupt at length). Let it end first.
                query.processAllAvailable()
                break
            time.sleep(1)
    finally:
        query.stop()
    rows = spark.read.parquet(str(args.parquet)).count() if args.parquet.exists() else 0
    print(f"Parquet table {args.parquet}: {rows} rows; results on queue {args.sink!r}")
    spark.stop()


if __name__ == "__main__":
    main()
