"""`conveyor analyze`: the Spark job on a synthetic log, on a real node's log, and its CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from conveyor.spark.analyze import AnalyzeError, Summary, analyze, candidates_table

T0 = 1_763_805_600_000  # 2025-11-22 10:00:00 UTC, a minute boundary
NODE_A, NODE_B, NODE_C = "a" * 40, "b" * 40, "c" * 40
EVIL_QUEUE = '<script>alert("q3")</script>&'


@dataclass(frozen=True)
class Event:
    at: int  # ms after T0
    node: str
    event: str
    id: str
    queue: str
    nacks: int = 0
    additional_deliveries: int = 0

    def line(self) -> str:
        return json.dumps(
            {
                "time_ms": T0 + self.at,
                "node": self.node,
                "event": self.event,
                "id": self.id,
                "queue": self.queue,
                "nacks": self.nacks,
                "additional_deliveries": self.additional_deliveries,
            }
        )


def _job(node: str, job: str, queue: str, *steps: tuple[int, str, int, int]) -> list[Event]:
    return [Event(at, node, event, job, queue, n, ad) for at, event, n, ad in steps]


EVENTS: list[Event] = [
    # q1 on node A. j1: wait 1000, ack 3000; added in a cluster (replicated before queued).
    *_job(NODE_A, "D-j1", "q1", (0, "added", 0, 0), (0, "replicated", 0, 0),
          (0, "queued", 0, 0), (1000, "delivered", 0, 0), (3000, "acked", 0, 0)),
    # j2: nacked once, delivered again in minute 1, acked: wait 2000, ack 61500.
    *_job(NODE_A, "D-j2", "q1", (500, "added", 0, 0), (500, "queued", 0, 0),
          (2500, "delivered", 0, 0), (4000, "nacked", 1, 0), (4000, "queued", 1, 0),
          (61000, "delivered", 1, 0), (62000, "acked", 1, 0)),
    # j3: retry timeout then a nack: nacks 1 + additional deliveries 1 = 2, a candidate.
    *_job(NODE_A, "D-j3", "q1", (1000, "added", 0, 0), (1000, "queued", 0, 0),
          (5000, "delivered", 0, 0), (65000, "requeued", 0, 0), (66000, "delivered", 0, 1),
          (67000, "nacked", 1, 1), (67000, "queued", 1, 1), (68000, "delivered", 1, 1),
          (70000, "acked", 1, 1)),
    # j8: only its ack is in the log (added before the log began): no wait_ms/ack_ms.
    *_job(NODE_A, "D-j8", "q1", (5000, "acked", 0, 0)),
    # q2 on node B. j4: never delivered, expired in minute 2.
    *_job(NODE_B, "D-j4", "q2", (2000, "added", 0, 0), (2000, "queued", 0, 0),
          (120000, "expired", 0, 0)),
    # j5: delayed (added, queued later), nacked three times, dead-lettered: the worst.
    *_job(NODE_B, "D-j5", "q2", (3000, "added", 0, 0), (10000, "queued", 0, 0),
          (11000, "delivered", 0, 0), (12000, "nacked", 1, 0), (12000, "queued", 1, 0),
          (13000, "delivered", 1, 0), (14000, "nacked", 2, 0), (14000, "queued", 2, 0),
          (15000, "delivered", 2, 0), (16000, "nacked", 3, 0), (130000, "dead-lettered", 3, 0)),
    # j6: delivered after 500 ms, then DELJOB.
    *_job(NODE_B, "D-j6", "q2", (4000, "added", 0, 0), (4000, "queued", 0, 0),
          (4500, "delivered", 0, 0), (5000, "deleted", 0, 0)),
    # j9: dead-lettered without a redelivery: a candidate all the same.
    *_job(NODE_B, "D-j9", "q2", (6000, "added", 0, 0), (6000, "queued", 0, 0),
          (7000, "dead-lettered", 0, 0)),
    # A queue name that must be escaped in HTML, on node C in a subdirectory.
    *_job(NODE_C, "D-j7", EVIL_QUEUE, (180000, "added", 0, 0), (180000, "queued", 0, 0),
          (180100, "delivered", 0, 0), (180600, "acked", 0, 0)),
]  # fmt: skip

MALFORMED = [
    "not json at all",
    '{"time_ms":"yesterday","node":"x","event":"added","id":"D-x","queue":"q1",'
    '"nacks":0,"additional_deliveries":0}',
    '{"node":"x"}',
    '{"time_ms":1763805600000,"node"',
    "[1, 2]",
]

EXPECTED_LATENCY = {  # id -> (wait_ms, ack_ms, deliveries, nacks, additional_deliveries)
    "D-j1": (1000, 3000, 1, 0, 0),
    "D-j2": (2000, 61500, 2, 1, 0),
    "D-j3": (4000, 69000, 3, 1, 1),
    "D-j8": (None, None, 0, 0, 0),
    "D-j4": (None, None, 0, 0, 0),
    "D-j5": (8000, None, 3, 3, 0),
    "D-j6": (500, None, 1, 0, 0),
    "D-j9": (None, None, 0, 0, 0),
    "D-j7": (100, 600, 1, 0, 0),
}


def write_log(event_dir: Path) -> None:
    by_node: dict[str, list[str]] = {}
    for event in sorted(EVENTS, key=lambda e: e.at):
        by_node.setdefault(event.node, []).append(event.line())
    (event_dir / "sub").mkdir(parents=True)
    files = {
        NODE_A: event_dir / f"events-20251122T10-{NODE_A[:8]}.jsonl",
        NODE_B: event_dir / f"events-20251122T10-{NODE_B[:8]}.jsonl",
        NODE_C: event_dir / "sub" / f"events-20251122T10-{NODE_C[:8]}.jsonl",
    }
    for node, path in files.items():
        lines = by_node[node]
        if node == NODE_A:
            # Malformed lines among good ones, and a blank line, which is not counted.
            lines = lines[:3] + MALFORMED + [""] + lines[3:]
        path.write_text("\n".join(lines) + "\n")
    # Not an event file: ignored.
    (event_dir / "notes.txt").write_text(EVENTS[0].line() + "\n")


def epoch_s(frame: DataFrame, column: str) -> DataFrame:
    return frame.withColumn(column, F.unix_seconds(F.col(column)))


# Whole-stage codegen and adaptive execution pay off on big inputs; on these tiny logs their
# compile and planning time is most of the run. The job's results do not depend on either.
_QUICK_SQL = {"spark.sql.codegen.wholeStage": "false", "spark.sql.adaptive.enabled": "false"}


@pytest.fixture(scope="module")
def spark(spark: SparkSession) -> Iterator[SparkSession]:
    """The shared session, set for tiny inputs while this module runs."""
    saved = {key: spark.conf.get(key) for key in _QUICK_SQL}
    for key, value in _QUICK_SQL.items():
        spark.conf.set(key, value)
    yield spark
    for key, value in saved.items():
        spark.conf.set(key, value)


@pytest.fixture(scope="module")
def synthetic(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Summary, Path]:
    root = tmp_path_factory.mktemp("analyze")
    write_log(root / "events")
    summary = analyze(spark, root / "events", root / "out", redelivery_threshold=2)
    return summary, root / "out"


def test_summary_counts(synthetic: tuple[Summary, Path]) -> None:
    summary, out = synthetic
    kinds = Counter(e.event for e in EVENTS)
    assert summary.events == len(EVENTS)
    assert summary.malformed_lines == len(MALFORMED)
    assert summary.unknown_events == 0
    assert (summary.added, summary.queued, summary.delivered, summary.acked) == (
        kinds["added"],
        kinds["queued"],
        kinds["delivered"],
        kinds["acked"],
    )
    assert (summary.nacked, summary.requeued, summary.expired) == (5, 1, 1)
    assert (summary.deleted, summary.dead_lettered, summary.evicted) == (1, 2, 0)
    assert (summary.jobs, summary.queues, summary.nodes) == (9, 3, 3)
    assert summary.first_event_ms == T0
    assert summary.last_event_ms == T0 + 180600
    assert summary.dead_letter_candidates == 3
    assert summary.report_path == str(out / "report.html")
    assert set(summary.tables) == {"queue_minute", "job_latency", "dead_letter_candidates"}


def test_queue_minute_table(spark: SparkSession, synthetic: tuple[Summary, Path]) -> None:
    _, out = synthetic
    frame = epoch_s(spark.read.parquet(str(out / "queue_minute")), "minute")
    assert dict(frame.dtypes)["jobs_in"] == "bigint"
    rows = {(row["queue"], row["minute"]): row.asDict() for row in frame.collect()}
    columns = {
        "jobs_in": "added",
        "jobs_out": "delivered",
        "acks": "acked",
        "nacks": "nacked",
        "requeues": "requeued",
        "expiries": "expired",
        "deletes": "deleted",
        "dead_letters": "dead-lettered",
        "evictions": "evicted",
    }
    expected: dict[tuple[str, int], Counter[str]] = {}
    for event in EVENTS:
        key = (event.queue, (T0 + event.at) // 60_000 * 60)
        expected.setdefault(key, Counter())[event.event] += 1
    assert set(rows) == set(expected)
    for key, kinds in expected.items():
        assert {name: rows[key][name] for name in columns} == {
            name: kinds[event] for name, event in columns.items()
        }, key
    # Spot checks written out, in case the expectation above and the job share a mistake.
    assert rows[("q1", T0 // 1000)]["jobs_in"] == 3
    assert rows[("q1", T0 // 1000)]["jobs_out"] == 3
    assert rows[("q1", T0 // 1000)]["acks"] == 2
    assert rows[("q1", T0 // 1000 + 60)]["requeues"] == 1
    assert rows[("q2", T0 // 1000 + 120)]["expiries"] == 1


def test_job_latency_table(spark: SparkSession, synthetic: tuple[Summary, Path]) -> None:
    _, out = synthetic
    frame = spark.read.parquet(str(out / "job_latency"))
    for column in ("added_at", "first_delivered_at", "acked_at"):
        assert dict(frame.dtypes)[column] == "timestamp"
        frame = epoch_s(frame, column)
    rows = {row["id"]: row for row in frame.collect()}
    assert set(rows) == set(EXPECTED_LATENCY)
    for job, (wait, ack, deliveries, nacks, additional) in EXPECTED_LATENCY.items():
        row = rows[job]
        assert (
            row["wait_ms"],
            row["ack_ms"],
            row["deliveries"],
            row["nacks"],
            row["additional_deliveries"],
        ) == (wait, ack, deliveries, nacks, additional), job
    assert rows["D-j2"]["queue"] == "q1"
    assert rows["D-j2"]["added_at"] == T0 // 1000  # T0 + 500 ms, truncated to seconds
    assert rows["D-j2"]["acked_at"] == (T0 + 62000) // 1000
    assert rows["D-j8"]["added_at"] is None
    assert rows["D-j5"]["last_event"] == "dead-lettered"
    assert rows["D-j1"]["last_event"] == "acked"


def test_dead_letter_candidates(spark: SparkSession, synthetic: tuple[Summary, Path]) -> None:
    _, out = synthetic
    rows = spark.read.parquet(str(out / "dead_letter_candidates")).collect()
    # Worst first, as written (one sorted file).
    assert [(r["id"], r["redeliveries"], r["dead_lettered"]) for r in rows] == [
        ("D-j5", 3, True),
        ("D-j3", 2, False),
        ("D-j9", 0, True),
    ]
    assert rows[0]["nacks"] == 3 and rows[0]["deliveries"] == 3
    assert rows[1]["nacks"] == 1 and rows[1]["additional_deliveries"] == 1


def test_threshold_changes_candidates(spark: SparkSession, synthetic: tuple[Summary, Path]) -> None:
    _, out = synthetic
    job_latency = spark.read.parquet(str(out / "job_latency"))
    # j2 (one nack) joins j5, j3 and j9 at 1; only j5 and the dead-lettered j9 remain at 3.
    assert candidates_table(job_latency, 1).count() == 4
    assert {r["id"] for r in candidates_table(job_latency, 3).collect()} == {"D-j5", "D-j9"}


def test_report(synthetic: tuple[Summary, Path]) -> None:
    summary, out = synthetic
    html = (out / "report.html").read_text()
    assert re.search(r"https?://", html) is None
    assert html.count('src="data:image/png;base64,') == 2
    assert '<td>Jobs added</td><td class="n">8</td>' in html
    assert '<td>Jobs delivered</td><td class="n">11</td>' in html
    assert '<td>Jobs acked</td><td class="n">5</td>' in html
    assert '<td>Malformed lines skipped</td><td class="n">5</td>' in html
    # Latency percentiles over all queues: wait_ms of 6 jobs, ack_ms of 4.
    assert re.search(r"<td>all queues</td><td>wait_ms</td>" + r'<td class="n">6</td>', html)
    assert re.search(
        r"<td>all queues</td><td>ack_ms</td>" + r'<td class="n">4</td>(<td class="n">[\d,]+</td>)'
        r'{3}<td class="n">69,000</td>',
        html,
    )
    assert "<td>D-j5</td><td>q2</td>" in html
    # Names from the log are escaped, never markup.
    assert "<script>" not in html
    assert "&lt;script&gt;alert(&quot;q3&quot;)&lt;/script&gt;&amp;" in html
    assert summary.queues == 3


def test_missing_and_empty_dirs(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(AnalyzeError, match="does not exist"):
        analyze(spark, tmp_path / "nope", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(AnalyzeError, match=r"no \*\.jsonl"):
        analyze(spark, tmp_path / "empty", tmp_path / "out")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "events-x.jsonl").write_text("garbage\n\n{}\n")
    with pytest.raises(AnalyzeError, match=r"no job events .*\(2 malformed lines skipped\)"):
        analyze(spark, tmp_path / "bad", tmp_path / "out")


def test_real_node_log(spark: SparkSession, tmp_path: Path) -> None:
    from tests.servers import running_node

    event_dir = tmp_path / "events"
    added, fetched, acked, nacked = 20, 12, 7, 3
    with running_node(tmp_path / "node", "--event-log", str(event_dir)) as node:
        client = node.client()
        ids = [client.execute_command("ADDJOB", "q", f"body {i}", 0) for i in range(added)]
        ids += [client.execute_command("ADDJOB", "other", "x", 0)]
        jobs = client.execute_command("GETJOB", "NOHANG", "COUNT", fetched, "FROM", "q")
        assert len(jobs) == fetched
        got = [job[1] for job in jobs]
        assert client.execute_command("ACKJOB", *got[:acked]) == acked
        assert client.execute_command("NACK", *got[acked : acked + nacked]) == nacked
        client.close()
        node.stop()  # flushes the event log

    summary = analyze(spark, event_dir, tmp_path / "out")
    assert (summary.added, summary.delivered, summary.acked, summary.nacked) == (
        added + 1,
        fetched,
        acked,
        nacked,
    )
    assert summary.malformed_lines == 0
    assert (summary.jobs, summary.queues, summary.nodes) == (added + 1, 2, 1)

    totals = (
        spark.read.parquet(str(tmp_path / "out" / "queue_minute"))
        .groupBy("queue")
        .agg(*[F.sum(c).alias(c) for c in ("jobs_in", "jobs_out", "acks", "nacks")])
        .collect()
    )
    by_queue = {row["queue"]: row.asDict() for row in totals}
    assert by_queue["q"] == {
        "queue": "q",
        "jobs_in": added,
        "jobs_out": fetched,
        "acks": acked,
        "nacks": nacked,
    }
    assert by_queue["other"]["jobs_in"] == 1

    latency = spark.read.parquet(str(tmp_path / "out" / "job_latency"))
    assert latency.where(F.col("ack_ms").isNotNull()).count() == acked
    assert latency.where(F.col("wait_ms") >= 0).count() == fetched
    assert latency.where(F.col("nacks") == 1).count() == nacked

    html = (tmp_path / "out" / "report.html").read_text()
    for label, count in (("added", added + 1), ("delivered", fetched), ("acked", acked)):
        assert f'<td>Jobs {label}</td><td class="n">{count}</td>' in html


def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conveyor.cli", "analyze", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ},
    )


def test_cli(tmp_path: Path) -> None:
    write_log(tmp_path / "events")
    out = tmp_path / "out"
    quick = [arg for key, value in _QUICK_SQL.items() for arg in ("--conf", f"{key}={value}")]
    result = _run_cli(str(tmp_path / "events"), "--out", str(out), "--master", "local[2]", *quick)
    assert result.returncode == 0, result.stderr
    for name in ("queue_minute", "job_latency", "dead_letter_candidates"):
        assert (out / name / "_SUCCESS").exists()
    assert (out / "report.html").exists()
    assert f"report: {out / 'report.html'}" in result.stdout
    assert "(5 malformed lines skipped)" in result.stdout
    assert "added 8, delivered 11, acked 5" in result.stdout
    assert "dead-letter candidates: 3" in result.stdout


def test_cli_errors(tmp_path: Path) -> None:
    result = _run_cli(str(tmp_path / "missing"), "--out", str(tmp_path / "out"))
    assert result.returncode != 0
    assert "Error: event directory" in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()

    (tmp_path / "empty").mkdir()
    result = _run_cli(str(tmp_path / "empty"), "--out", str(tmp_path / "out"))
    assert result.returncode != 0
    assert "holds no *.jsonl event files" in result.stderr
    assert "Traceback" not in result.stderr

    write_log(tmp_path / "events")
    (tmp_path / "a-file").write_text("")
    result = _run_cli(str(tmp_path / "events"), "--out", str(tmp_path / "a-file" / "out"))
    assert result.returncode == 1
    assert "Error: cannot create output directory" in result.stderr
    assert "Traceback" not in result.stderr
