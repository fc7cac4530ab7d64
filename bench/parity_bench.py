"""Is one cluster column above, below or level with C Disque's? (`make bench-parity`)

`bench/cluster_bench.py` gives each column's ratio as the median of a few paired rounds.
Where the two are close (sync -P 1 on this machine kind), that median cannot say which
is ahead: two clusters of the *same* Conveyor build, run this way, differ by 0.78-1.27x
from round to round and by 0.92-1.04x in the median of 4 to 8 rounds
(docs/performance.md, twenty-second look). This bench answers with that noise measured
beside the comparison, in one run:

- three clusters up together: Conveyor A and Conveyor B (the same build, started the same
  way) and C Disque (DISQUE_SERVER); without DISQUE_SERVER, only A and B (the control);
- `--rounds` rounds (30) of one column of cluster_bench (`--column`, "sync -P 1" by
  default), the order of the three going through all six permutations so that none is
  always first or last. Before each measured run its cluster takes WARM_JOBS synchronous
  ADDJOBs at -P 1 (unmeasured), then is emptied (DEBUG FLUSHALL): a run starts on a
  cluster whose code and data the caches hold, as a busy one's would, not on what the
  cluster before it left there. Without that, a Conveyor run that came straight after
  the other Conveyor cluster's was ~2 % faster against C Disque than one after C Disque
  (twenty-second look);
- for each pair, the median of the rounds' ratios and a 95 % bootstrap interval of that
  median (resampled with a fixed seed: the same rates print the same interval); the
  control pair A/B shows how far apart identical builds land;
- a verdict on Conveyor (the mean of A and B in each round) against C Disque: `above`
  or `below` when the interval excludes 1.0, `level` when it holds it.

Figures are printed, never asserted; only 127.0.0.1; every run is bounded. Usage:
    python -m bench.parity_bench [--column NAME] [--rounds N] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

from bench.cluster_bench import (
    BODY,
    cluster,
    columns_for,
    conveyor_command,
    disque_command,
    first_load,
    flush_all,
    print_compiled,
)
from bench.node_common import redis_benchmark

CONVEYOR_A = "Conveyor A"
CONVEYOR_B = "Conveyor B"
DISQUE = "C Disque"
RESAMPLES = 5000
SEED = 1
# Each measured run is preceded by this much of the sync -P 1 load on the same cluster.
WARM_JOBS = 5_000
WARM_ADD = (b"ADDJOB", b"q", BODY.encode(), b"5000", b"REPLICATE", b"3")


def median_interval(ratios: Sequence[float], seed: int = SEED) -> tuple[float, float, float]:
    """The median of `ratios` and a 95 % bootstrap interval of it (RESAMPLES resamples
    with replacement, drawn from `seed`)."""
    if not ratios:
        raise ValueError("no ratios to summarise")
    draw = random.Random(seed)
    medians = sorted(
        statistics.median(draw.choices(ratios, k=len(ratios))) for _ in range(RESAMPLES)
    )
    low = medians[int(RESAMPLES * 0.025)]
    high = medians[int(RESAMPLES * 0.975) - 1]
    return statistics.median(ratios), low, high


def verdict(low: float, high: float) -> str:
    """`above` or `below` 1.0 when the interval excludes it, else `level`."""
    if low > 1.0:
        return "above"
    if high < 1.0:
        return "below"
    return "level"


def round_orders(names: Sequence[str]) -> list[tuple[str, ...]]:
    """The order of each round, cycling over every permutation of `names`."""
    return list(itertools.permutations(names))


def run_rounds(column: str, rounds: int, quick: bool) -> dict[str, list[float]]:
    """Jobs/s of each cluster in each round."""
    kinds: dict[str, Callable[[int, Path], list[str]]] = {
        CONVEYOR_A: conveyor_command,
        CONVEYOR_B: conveyor_command,
    }
    if os.environ.get("DISQUE_SERVER"):
        kinds[DISQUE] = disque_command
    rates: dict[str, list[float]] = {name: [] for name in kinds}
    with ExitStack() as stack:
        clusters = {name: stack.enter_context(cluster(kind, 3)) for name, kind in kinds.items()}
        print_compiled(clusters[CONVEYOR_A][0])
        columns = {name: columns_for(nodes, 3, quick) for name, nodes in clusters.items()}
        if column not in columns[CONVEYOR_A]:
            raise SystemExit(f"no column {column!r}: one of {', '.join(columns[CONVEYOR_A])}")
        runs = {name: each[column] for name, each in columns.items()}
        for nodes in clusters.values():
            first_load(nodes)
        orders = round_orders(list(kinds))
        for number in range(rounds):
            for name in orders[number % len(orders)]:
                redis_benchmark(clusters[name][0].port, WARM_JOBS, 1, *WARM_ADD)
                flush_all(clusters[name])
                rates[name].append(runs[name][1]())
            figures = "  ".join(f"{name} {rates[name][-1]:9,.0f}" for name in kinds)
            print(f"round {number + 1:3}  {figures}", flush=True)
    return rates


def report(column: str, rates: dict[str, list[float]]) -> list[str]:
    """The summary lines of a run: medians, each pair's ratio and interval, the verdict."""
    rounds = len(rates[CONVEYOR_A])
    lines = [f"{column}, {rounds} rounds; jobs/s, the median of the rounds:"]
    lines += [f"  {name:12} {statistics.median(runs):9,.0f}" for name, runs in rates.items()]
    lines.append("ratio of each round: median, 95 % interval of the median, range")
    pairs = [(f"{CONVEYOR_A} / {CONVEYOR_B} (control)", rates[CONVEYOR_A], rates[CONVEYOR_B])]
    if DISQUE in rates:
        both = [(a + b) / 2 for a, b in zip(rates[CONVEYOR_A], rates[CONVEYOR_B], strict=True)]
        pairs += [
            (f"{CONVEYOR_A} / {DISQUE}", rates[CONVEYOR_A], rates[DISQUE]),
            (f"{CONVEYOR_B} / {DISQUE}", rates[CONVEYOR_B], rates[DISQUE]),
            (f"Conveyor (A+B)/2 / {DISQUE}", both, rates[DISQUE]),
        ]
    summary = (0.0, 0.0, 0.0)
    for label, mine, theirs in pairs:
        ratios = [a / b for a, b in zip(mine, theirs, strict=True)]
        summary = median_interval(ratios)
        lines.append(
            f"  {label:34} {summary[0]:.3f}  {summary[1]:.3f}-{summary[2]:.3f}  "
            f"{min(ratios):.2f}-{max(ratios):.2f}"
        )
    if DISQUE in rates:  # the last pair is Conveyor's mean against C Disque
        place = {"above": "above", "below": "below", "level": "level with"}
        lines.append(f"verdict: Conveyor is {place[verdict(summary[1], summary[2])]} C Disque")
    else:
        lines.append("DISQUE_SERVER is not set: the control pair only, no verdict")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--column", default="sync -P 1", help="a column of cluster_bench")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="cluster_bench's --quick counts")
    args = parser.parse_args()
    rates = run_rounds(args.column, max(1, args.rounds), args.quick)
    print("\n".join(report(args.column, rates)))


if __name__ == "__main__":
    main()
