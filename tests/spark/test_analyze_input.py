"""`conveyor analyze` on event lines a node would never write: each one is counted as
malformed and left out of every table, and the job still completes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from conveyor.spark.analyze import Summary, analyze

T0 = 1_763_805_600_000  # 2025-11-22 10:00:00 UTC


def _event(**changes: Any) -> str:
    event = {
        "time_ms": T0,
        "node": "a" * 40,
        "event": "added",
        "id": "D-good",
        "queue": "q",
        "nacks": 0,
        "additional_deliveries": 0,
    }
    return json.dumps({**event, **changes})


GOOD = [
    _event(),
    _event(time_ms=T0 + 1000, event="delivered"),
    _event(time_ms=T0 + 2000, event="acked"),
]


def _run(spark: SparkSession, tmp_path: Path, bad: list[str]) -> Summary:
    events = tmp_path / "events"
    events.mkdir()
    (events / "events-x.jsonl").write_text("\n".join([*GOOD, *bad]) + "\n")
    return analyze(spark, events, tmp_path / "out")


def _assert_only_the_good_lines_count(summary: Summary, bad: list[str]) -> None:
    assert summary.malformed_lines == len(bad)
    assert summary.events == len(GOOD)
    assert (summary.added, summary.delivered, summary.acked) == (1, 1, 1)
    assert (summary.unknown_events, summary.jobs, summary.queues) == (0, 1, 1)
    assert (summary.first_event_ms, summary.last_event_ms) == (T0, T0 + 2000)


def test_values_out_of_range_are_malformed_not_a_failed_job(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Each of these stopped the whole job: DATETIME_OVERFLOW or ARITHMETIC_OVERFLOW in
    # Spark, or "year 33658 is out of range" writing the report.
    bad = [
        _event(id="D-late", time_ms=2**63 - 1),
        _event(id="D-far", time_ms=10**15),
        _event(id="D-before", time_ms=-(10**15)),
        _event(id="D-counters", nacks=2**63 - 1, additional_deliveries=5),
        _event(id="D-negative", nacks=-1),
    ]
    _assert_only_the_good_lines_count(_run(spark, tmp_path, bad), bad)


@pytest.mark.parametrize(
    "bad",
    [
        # A JSON array is not an event: Spark's JSON reader made a row of each object in
        # it, and no row (not even a malformed one) of an empty array.
        ["[]", f"[{_event(id='D-x')}, {_event(id='D-y')}]"],
        # Spark's JSON reader turns any value into a string column's text.
        [_event(id=42), _event(event=5), _event(queue=["q"]), _event(node={"a": 1})],
    ],
    ids=["arrays", "non-string-values"],
)
def test_lines_of_the_wrong_shape_or_type_are_malformed(
    spark: SparkSession, tmp_path: Path, bad: list[str]
) -> None:
    _assert_only_the_good_lines_count(_run(spark, tmp_path, bad), bad)
