"""Run simulator seeds from the command line: `python -m tests.sim.run --seed N` replays one
seed; `--seeds A:B` runs a range and prints the totals (and every failing seed)."""

from __future__ import annotations

import argparse
import time

from tests.sim.history import run_history
from tests.sim.ledger import Totals, Violation


def run_range(seeds: range, stop_at_first: bool = False) -> tuple[Totals, list[str]]:
    totals = Totals()
    failures: list[str] = []
    for seed in seeds:
        try:
            totals.add(run_history(seed))
        except Violation as exc:
            failures.append(str(exc))
            if stop_at_first:
                break
    return totals, failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, help="replay one seed")
    parser.add_argument("--seeds", default="0:100", help="a range A:B of seeds")
    options = parser.parse_args()
    if options.seed is not None:
        seeds = range(options.seed, options.seed + 1)
        try:
            print(f"seed {options.seed}: digest {run_history(options.seed).digest}")
        except Violation as exc:
            print("FAIL", exc)
        return
    else:
        start, end = (int(part) for part in options.seeds.split(":"))
        seeds = range(start, end)
    started = time.monotonic()
    totals, failures = run_range(seeds)
    for failure in failures:
        print("FAIL", failure)
    print(f"{len(seeds)} seeds in {time.monotonic() - started:.1f} s: {totals.line()}")
    print(f"{len(failures)} failing seed(s)")


if __name__ == "__main__":
    main()
