"""Option parsing of the data source, without Spark: every bad value is an OptionError
that names the option."""

from __future__ import annotations

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
