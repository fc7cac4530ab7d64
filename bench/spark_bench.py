"""Spark benchmark: jobs per second through a streaming query, beside raw consumption.

In one run, on one node (a real `conveyor server` on 127.0.0.1):
1. raw client consumption: N queued 100-byte jobs taken with pipelined
   `GETJOB NOHANG COUNT 100` and acked with ACKJOB, until the node is empty;
2. the same N jobs queued again, consumed by a PySpark streaming query on local[2]:
   the `conveyor` source → a trivial transform (`length(body)`) → the noop sink, jobs
   acked when Spark commits each batch, until the node holds no job.
Prints jobs/s for both: overall for Spark (from `start()`, so query start-up counts) and
steady (from the end of the first batch). Target: >= 50,000 jobs/s through Spark.
Bounded: every phase stops at its own deadline.
Usage: python -m bench.spark_bench [--jobs N] [--batch ROWS] [--master URL] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.node_bench import conveyor_node
from conveyor.client import Client
from conveyor.spark.link import NodeLink

BODY = b"x" * 100
TARGET_JOBS_PER_S = 50_000
FILL_CHUNK = 10_000


def fill(port: int, jobs: int) -> float:
    started = time.perf_counter()
    with Client(f"127.0.0.1:{port}") as client:
        for start in range(0, jobs, FILL_CHUNK):
            client.add_jobs("bench", [BODY] * min(FILL_CHUNK, jobs - start))
    return time.perf_counter() - started


def registered_jobs(client: Client) -> int:
    return int(client.info("jobs")["registered_jobs"])


def raw_consumption(port: int, jobs: int, deadline_s: float) -> float:
    """GETJOB NOHANG COUNT 100 (10 pipelined) then one ACKJOB per reply, until empty."""
    link = NodeLink(("127.0.0.1", port), None, 10.0)
    taken = 0
    started = time.perf_counter()
    deadline = started + deadline_s
    while taken < jobs and time.perf_counter() < deadline:
        replies = link.pipeline(
            [("GETJOB", "NOHANG", "COUNT", 100, "FROM", "bench") for _ in range(10)]
        )
        acks = [("ACKJOB", *[job[1] for job in reply]) for reply in replies if reply]
        if not acks:
            break
        link.pipeline(acks)
        taken += sum(len(reply) for reply in replies if reply)
    elapsed = time.perf_counter() - started
    link.close()
    return taken / elapsed


def spark_consumption(
    port: int, jobs: int, batch_rows: int, master: str, workdir: Path, deadline_s: float
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from conveyor.spark import register
    from conveyor.spark.session import local_session

    spark = local_session(master, app_name="conveyor-bench", conf={"spark.driver.memory": "4g"})
    register(spark)
    # Warm the JVM and the Python workers (a batch read of an empty queue imports the
    # data source in them) once, so the figure is the query's, not the session's.
    spark.range(1000).selectExpr("sum(id)").collect()
    spark.read.format("conveyor").option("nodes", f"127.0.0.1:{port}").option(
        "queues", "warm-up"
    ).load().collect()
    frame = (
        spark.readStream.format("conveyor")
        .option("nodes", f"127.0.0.1:{port}")
        .option("queues", "bench")
        .option("maxJobsPerTrigger", batch_rows)
        .load()
        .select("id", F.length("body").alias("size"))
    )
    with Client(f"127.0.0.1:{port}") as client:
        started = time.perf_counter()
        query = (
            frame.writeStream.format("noop")
            .option("checkpointLocation", str(workdir / "checkpoint"))
            .start()
        )
        first_batch_done: float | None = None
        first_batch_rows = 0
        remaining = jobs
        try:
            while time.perf_counter() - started < deadline_s and query.isActive:
                progress = query.lastProgress
                if first_batch_done is None and progress and progress["numInputRows"]:
                    first_batch_done = time.perf_counter()
                    first_batch_rows = int(progress["numInputRows"])
                remaining = registered_jobs(client)
                if remaining == 0:
                    break
                time.sleep(0.05)
            elapsed = time.perf_counter() - started
            batches = [
                (p["batchId"], p["numInputRows"], p["durationMs"]) for p in query.recentProgress
            ]
        finally:
            query.stop()
            spark.stop()
    done = jobs - remaining
    steady_s = elapsed - (first_batch_done - started) if first_batch_done else elapsed
    return {
        "jobs": done,
        "seconds": round(elapsed, 2),
        "jobs_per_s": round(done / elapsed),
        "steady_jobs_per_s": round((done - first_batch_rows) / steady_s) if steady_s else 0,
        "batch_rows": batch_rows,
        "left_on_node": remaining,
        "batches": batches,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=250_000, help="maxJobsPerTrigger")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"jobs": args.jobs}
    with tempfile.TemporaryDirectory(prefix="conveyor-spark-bench-") as tmp:
        workdir = Path(tmp)
        with conveyor_node(workdir) as (port, _):
            seconds = fill(port, args.jobs)
            print(f"queued {args.jobs:,} jobs in {seconds:.1f} s")
            raw = raw_consumption(port, args.jobs, deadline_s=300)
            results["raw_jobs_per_s"] = round(raw)
            print(f"raw client (GETJOB COUNT 100 + ACKJOB): {raw:,.0f} jobs/s")
            fill(port, args.jobs)
            spark = spark_consumption(
                port, args.jobs, args.batch, args.master, workdir, deadline_s=600
            )
            results["spark"] = spark
    print(
        f"Spark streaming ({args.master}, batches of {args.batch:,}): "
        f"{spark['jobs_per_s']:,} jobs/s overall ({spark['jobs']:,} jobs in "
        f"{spark['seconds']} s, query start-up included), "
        f"{spark['steady_jobs_per_s']:,} jobs/s after the first batch; "
        f"{spark['left_on_node']} jobs left on the node"
    )
    ratio = spark["jobs_per_s"] / results["raw_jobs_per_s"]
    met = "met" if spark["jobs_per_s"] >= TARGET_JOBS_PER_S else "MISSED"
    print(f"Spark / raw: {ratio:.2f}; target {TARGET_JOBS_PER_S:,} jobs/s through Spark: {met}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
