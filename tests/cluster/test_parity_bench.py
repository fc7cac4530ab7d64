"""The statistics of bench/parity_bench.py: the interval, the verdict and the report."""

from __future__ import annotations

import random

import pytest

from bench.parity_bench import (
    CONVEYOR_A,
    CONVEYOR_B,
    DISQUE,
    median_interval,
    report,
    round_orders,
    verdict,
)


def _noisy(centre: float, count: int, seed: int) -> list[float]:
    draw = random.Random(seed)
    return [centre * draw.uniform(0.85, 1.15) for _ in range(count)]


def test_the_interval_holds_the_median_and_is_the_same_for_the_same_ratios() -> None:
    ratios = _noisy(1.0, 30, seed=7)
    median, low, high = median_interval(ratios)
    assert low <= median <= high
    assert low < high
    assert median_interval(ratios) == (median, low, high)


def test_more_rounds_narrow_the_interval() -> None:
    few = median_interval(_noisy(1.0, 9, seed=3))
    many = median_interval(_noisy(1.0, 200, seed=3))
    assert many[2] - many[1] < few[2] - few[1]


def test_identical_ratios_give_a_point() -> None:
    assert median_interval([1.25] * 12) == (1.25, 1.25, 1.25)


def test_no_ratios_is_an_error() -> None:
    with pytest.raises(ValueError, match="no ratios"):
        median_interval([])


@pytest.mark.parametrize(("centre", "expected"), [(1.2, "above"), (0.8, "below"), (1.0, "level")])
def test_the_verdict_is_level_unless_the_interval_excludes_one(
    centre: float, expected: str
) -> None:
    _, low, high = median_interval(_noisy(centre, 40, seed=11))
    assert verdict(low, high) == expected


def test_every_cluster_takes_every_place_in_the_order() -> None:
    orders = round_orders([CONVEYOR_A, CONVEYOR_B, DISQUE])
    assert len(set(orders)) == 6
    for place in range(3):
        assert {order[place] for order in orders} == {CONVEYOR_A, CONVEYOR_B, DISQUE}


def test_the_report_compares_the_mean_of_both_builds_with_disque() -> None:
    rates = {
        CONVEYOR_A: [110.0, 120.0, 115.0, 118.0],
        CONVEYOR_B: [112.0, 118.0, 117.0, 116.0],
        DISQUE: [100.0, 100.0, 100.0, 100.0],
    }
    lines = report("sync -P 1", rates)
    assert lines[0] == "sync -P 1, 4 rounds; jobs/s, the median of the rounds:"
    mean_line = next(line for line in lines if line.lstrip().startswith("Conveyor (A+B)/2"))
    assert "1.165" in mean_line  # the median of 1.11, 1.19, 1.16, 1.17
    assert lines[-1] == "verdict: Conveyor is above C Disque"


def test_without_disque_the_report_has_the_control_and_no_verdict() -> None:
    rates = {CONVEYOR_A: [100.0, 104.0], CONVEYOR_B: [100.0, 96.0]}
    lines = report("sync -P 1", rates)
    assert any("(control)" in line for line in lines)
    assert not any(DISQUE in line for line in lines[:-1])
    assert lines[-1] == "DISQUE_SERVER is not set: the control pair only, no verdict"


def test_a_report_whose_interval_holds_one_says_level_with() -> None:
    rates = {
        CONVEYOR_A: [90.0, 110.0, 95.0, 105.0, 100.0],
        CONVEYOR_B: [92.0, 108.0, 97.0, 103.0, 100.0],
        DISQUE: [100.0] * 5,
    }
    assert report("sync -P 1", rates)[-1] == "verdict: Conveyor is level with C Disque"
