"""Option parsing of the data source, without Spark: every bad value is an OptionError
that names the option."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conveyor.spark.options import OptionError, parse_read_options, parse_write_options


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e300", "Infinity"])
@pytest.mark.parametrize("name", ["timeoutMs", "lease"])
def test_non_finite_or_huge_numbers_are_refused(name: str, value: str) -> None:
    # Accepted before, they made socket.create_connection or the lease thread's wait()
    # raise OverflowError inside Spark (a traceback, or WORKING silently never sent).
    with pytest.raises(OptionError, match=f"option {name} must be a number from 0 to"):
        parse_read_options({"queues": "q", name: value})


def test_non_finite_timeout_is_refused_for_writes_too() -> None:
    with pytest.raises(OptionError, match="option timeoutMs must be a number from 0 to"):
        parse_write_options({"queue": "q", "timeoutMs": "inf"})


def test_finite_numbers_still_parse() -> None:
    options = parse_read_options({"queues": "q", "timeoutMs": "2500", "lease": "0.5"})
    assert options.connection.timeout_s == 2.5
    assert options.lease_s == 0.5


@pytest.mark.parametrize(
    ("parse", "options", "name"),
    [
        (parse_read_options, {"queues": "q", "jornal": "/data/journal"}, "jornal"),
        (parse_read_options, {"queues": "q", "maxjobspertriger": "10"}, "maxjobspertriger"),
        (parse_read_options, {"queues": "q", "queue": "r"}, "queue"),
        (parse_write_options, {"queue": "q", "queues": "r,s"}, "queues"),
        (parse_write_options, {"queue": "q", "retries": "3"}, "retries"),
    ],
)
def test_unknown_options_are_refused_by_name(
    parse: Callable[[dict[str, str]], object], options: dict[str, str], name: str
) -> None:
    # Ignored before: a misspelt journal silently ran the query without exact replay.
    with pytest.raises(OptionError, match=f"unknown option {name};"):
        parse(options)


def test_options_spark_adds_itself_and_any_case_are_accepted() -> None:
    spark_added = {"path": "/x", "checkpointlocation": "/ck", "queryname": "n"}
    read = parse_read_options({"Queues": "q", "MAXJOBSPERTRIGGER": "5", **spark_added})
    assert read.max_jobs_per_trigger == 5
    write = parse_write_options({"queue": "q", "batchsize": "7", **spark_added})
    assert write.batch_size == 7
