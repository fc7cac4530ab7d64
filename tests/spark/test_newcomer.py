"""A newcomer's first runs of the Spark side: the example's --help, `conveyor analyze` on a
short log and on NACKs, and the streaming reader's connections after stop()."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib.dates as mdates
import pytest
import redis
from matplotlib.figure import Figure
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadMaxRows

from conveyor.spark import analyze as analyze_module
from conveyor.spark import report as report_module
from conveyor.spark.analyze import analyze
from conveyor.spark.options import parse_read_options
from conveyor.spark.report import ReportData
from conveyor.spark.stream_reader import ConveyorStreamReader
from tests.servers import NodeProcess, running_node
from tests.spark.streams import jobs_on_node
from tests.spark.test_example import load_example

T0 = 1_763_805_612_000  # 2025-11-22 10:00:12 UTC: not on a minute boundary
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


# -- examples/spark_pipeline.py --help ---------------------------------------------------------
def test_every_example_option_has_a_help_text(monkeypatch: pytest.MonkeyPatch) -> None:
    example = load_example()
    parsers: list[argparse.ArgumentParser] = []

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        parsers.append(self)
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    monkeypatch.setattr(sys, "argv", ["spark_pipeline.py", "--help"])
    with pytest.raises(SystemExit):
        example.main()
    (parser,) = parsers
    options = [action for action in parser._actions if action.option_strings]
    assert {"--nodes", "--source", "--sink", "--until-empty"} <= {
        option for action in options for option in action.option_strings
    }
    assert [a.option_strings for a in options if not (a.help or "").strip()] == []
    text = parser.format_help()
    assert "(default: 127.0.0.1:7711)" in text
    assert "(default: data/totals)" in text


# -- conveyor analyze ---------------------------------------------------------------------------
def _event(at: int, event: str, job: str, nacks: int = 0, additional: int = 0) -> str:
    return json.dumps(
        {
            "time_ms": T0 + at,
            "node": "a" * 40,
            "event": event,
            "id": job,
            "queue": "q",
            "nacks": nacks,
            "additional_deliveries": additional,
        }
    )


# As the node logs them (conveyor/core/engine.py): a NACK is "nacked" then "requeued" with
# the same counters; a RETRY timeout (or ENQUEUE) is a "requeued" that adds 1 to
# additional_deliveries. 20 seconds in all.
SHORT_LOG = [
    # A: requeued by its RETRY, then nacked (and requeued by the NACK), then acked.
    _event(0, "added", "D-a"), _event(0, "queued", "D-a"), _event(1000, "delivered", "D-a"),
    _event(4000, "requeued", "D-a", 0, 1), _event(5000, "delivered", "D-a", 0, 1),
    _event(6000, "nacked", "D-a", 1, 1), _event(6000, "requeued", "D-a", 1, 1),
    _event(7000, "delivered", "D-a", 1, 1), _event(8000, "acked", "D-a", 1, 1),
    # B: nacked, then requeued by its RETRY, then acked.
    _event(2000, "added", "D-b"), _event(2000, "queued", "D-b"),
    _event(3000, "delivered", "D-b"), _event(3500, "nacked", "D-b", 1, 0),
    _event(3500, "requeued", "D-b", 1, 0), _event(9000, "delivered", "D-b", 1, 0),
    _event(12000, "requeued", "D-b", 1, 1), _event(13000, "delivered", "D-b", 1, 1),
    _event(14000, "acked", "D-b", 1, 1),
    # C: NACK with a DELAY, acked before the delay ran out: no requeue at all.
    _event(10000, "added", "D-c"), _event(10000, "queued", "D-c"),
    _event(11000, "delivered", "D-c"), _event(11500, "nacked", "D-c", 1, 0),
    _event(20000, "acked", "D-c", 1, 0),
]  # fmt: skip


@pytest.fixture(scope="module")
def short_log(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, ReportData, list[Figure]]]:
    root = tmp_path_factory.mktemp("short")
    (root / "events").mkdir()
    (root / "events" / "events-20251122T10-aaaaaaaa.jsonl").write_text("\n".join(SHORT_LOG) + "\n")
    figures: list[Figure] = []
    reports: list[ReportData] = []
    render, write = report_module._png, analyze_module.write_report

    def capture_png(figure: Figure) -> str:
        figures.append(figure)
        return render(figure)

    def capture_report(path: Path, data: ReportData) -> None:
        reports.append(data)
        write(path, data)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report_module, "_png", capture_png)
        patch.setattr(analyze_module, "write_report", capture_report)
        summary = analyze(spark, root / "events", root / "out")
    yield summary, reports[0], figures


def test_short_log_throughput_axis_spans_the_log(
    short_log: tuple[Any, ReportData, list[Figure]],
) -> None:
    summary, data, figures = short_log
    assert summary.span_ms == 20_000
    axes = figures[0].axes[0]  # the throughput plot is drawn first
    left, right = (mdates.num2date(x).timestamp() * 1000 for x in axes.get_xlim())
    # Within a few seconds of the first and last event, not years around them.
    assert T0 - 5_000 <= left <= T0
    assert T0 + 20_000 <= right <= T0 + 25_000
    # Several points, not one per minute; ticks readable at the scale of seconds.
    assert len(data.throughput) >= 10
    labels = [label.get_text() for label in axes.get_xticklabels() if label.get_text()]
    ticks = [x for x in axes.get_xticks() if axes.get_xlim()[0] <= x <= axes.get_xlim()[1]]
    assert len(ticks) >= 3, labels
    assert not any(re.fullmatch(r"20\d\d", label) for label in labels), labels
    # Rates: 3 jobs added within the 20 s, whatever the buckets.
    width_s = data.bucket_s
    assert sum(point.jobs_in for point in data.throughput) * width_s / data.rate_seconds == 3


def test_requeues_after_a_nack_are_not_counted_as_retry_timeouts(
    short_log: tuple[Any, ReportData, list[Figure]], tmp_path: Path
) -> None:
    summary, _, _ = short_log
    assert summary.nacked == 3
    assert summary.requeued == 4  # every "requeued" line
    assert summary.requeued_without_nack == 2  # A's first and B's second
    html = Path(summary.report_path).read_text()
    row = '<td>Jobs requeued without a NACK (RETRY timeout, ENQUEUE)</td><td class="n">2</td>'
    assert row in html
    assert "<td>Jobs requeued (retry timeout)</td>" not in html


def test_requeue_counts_on_a_real_node_log(spark: SparkSession, tmp_path: Path) -> None:
    event_dir = tmp_path / "events"
    with running_node(tmp_path / "node", "--event-log", str(event_dir)) as node:
        client = node.client()
        retried = client.execute_command("ADDJOB", "q", "retried", 0, "RETRY", 1)
        nacked = client.execute_command("ADDJOB", "q", "nacked", 0, "RETRY", 60)
        jobs = client.execute_command("GETJOB", "NOHANG", "COUNT", 2, "FROM", "q")
        assert {job[1] for job in jobs} == {retried, nacked}
        assert client.execute_command("NACK", nacked) == 1
        deadline = time.monotonic() + 10
        while client.execute_command("QLEN", "q") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # the RETRY of 1 s puts `retried` back
        assert client.execute_command("QLEN", "q") == 2
        client.close()
        node.stop()  # flushes the event log
    summary = analyze(spark, event_dir, tmp_path / "out")
    assert (summary.nacked, summary.requeued, summary.requeued_without_nack) == (1, 2, 1)


# -- the streaming reader's connections --------------------------------------------------------
def _connected(client: redis.Redis) -> int:
    return len(client.execute_command("CLIENT", "LIST").decode().strip().splitlines())


@pytest.mark.parametrize("journal", [False, True])
def test_stop_closes_every_connection_the_reader_opened(
    node: NodeProcess, r: redis.Redis, tmp_path: Path, journal: bool
) -> None:
    pipe = r.pipeline(transaction=False)
    for index in range(30):
        pipe.execute_command("ADDJOB", "q", f"job {index}", 0)
    pipe.execute()
    assert _connected(r) == 1
    settings = {"nodes": f"127.0.0.1:{node.port}", "queues": "q"}
    if journal:
        settings["journal"] = str(tmp_path / "journal")
    options = parse_read_options(settings)
    reader = ConveyorStreamReader(options)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(10))  # leases 10, prefetches the next 10
    assert end["seq"] == 1
    assert len(reader.partitions(start, end)) >= 1
    reader.commit(end)  # acks the 10 in the background
    driver = reader._driver
    assert driver is not None
    deadline = time.monotonic() + 10
    while jobs_on_node(r) > 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert jobs_on_node(r) == 20
    links = list(getattr(driver, "_links", ()))
    assert _connected(r) > 1  # the caller's thread, the prefetch and ack threads

    reader.stop()

    deadline = time.monotonic() + 5
    while _connected(r) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _connected(r) == 1
    assert len(links) >= 2
    assert not any(link.connected for link in links)
    # The batch prefetched for a Spark batch that never came is back in its queue; with a
    # journal it stays leased there, for a restarted query to replay exactly.
    queued = 10 if journal else 20
    assert r.execute_command("QLEN", "q") == queued
    # A stopped reader opens nothing new.
    driver.lease(99, 5)
    assert _connected(r) == 1
    assert r.execute_command("QLEN", "q") == queued
