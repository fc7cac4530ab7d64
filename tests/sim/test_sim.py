"""The cluster simulator's seeds, its determinism, and the planted bugs it must catch.

SIM_SEEDS=<n> runs n seeds (300 by default, in chunks of 100) from SIM_SEED_START (0);
SIM_SEED=<s> replays one seed. A failing seed's message ends with its replay command;
the totals (histories, jobs, deliveries, duplicates, acks, faults, and for graceful leave:
leaves, external adds, jobs handed over, GETJOBs refused -LEAVING) print at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.sim.conftest import RESULTS
from tests.sim.history import run_history
from tests.sim.plants import PLANTS
from tests.sim.run import run_range

CHUNK = 100
ONLY = os.environ.get("SIM_SEED")
START = int(os.environ.get("SIM_SEED_START", "0"))
COUNT = 1 if ONLY else int(os.environ.get("SIM_SEEDS", "300"))
CHUNKS = (
    [range(int(ONLY), int(ONLY) + 1)]
    if ONLY
    else [range(s, min(s + CHUNK, START + COUNT)) for s in range(START, START + COUNT, CHUNK)]
)
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("seeds", CHUNKS, ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_seeds_keep_the_invariants(seeds: range) -> None:
    started = time.monotonic()
    totals, failures = run_range(seeds)
    RESULTS["totals"].add(totals)
    RESULTS["seeds"] += len(seeds)
    RESULTS["seconds"] += time.monotonic() - started
    RESULTS["failed"] += [failure.split(":")[0] for failure in failures]
    assert not failures, "\n".join(failures)


def test_a_seed_replays_to_the_same_bytes_whatever_the_hash_seed() -> None:
    """Same seed, same deliveries to the byte: in this process and in others whose
    PYTHONHASHSEED differs (set and dict orders must not leak into the history)."""
    here = run_history(7).digest
    assert run_history(7).digest == here
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-m", "tests.sim.run", "--seed", "7"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out.strip() == f"seed 7: digest {here}"


def test_messages_take_the_wire_format_or_not_alike() -> None:
    """The codec round trip changes nothing a node sees: same outcome without it."""
    with_wire, without = run_history(11), run_history(11, wire=False)
    assert with_wire.line() == without.line()


def test_histories_leave_the_cluster() -> None:
    """Graceful leave is in the histories: nodes leave, ADDJOBs on them replicate
    externally, they hand jobs over, and blocking GETJOBs on them get -LEAVING."""
    totals, failures = run_range(range(10))
    assert not failures, "\n".join(failures)
    assert totals.leaves and totals.external_adds, totals.line()
    assert totals.handed_over and totals.leaving_refused, totals.line()


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_a_planted_bug_is_caught(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plant = PLANTS[name]
    monkeypatch.setattr(plant.owner, plant.attribute, plant.replacement)
    _, failures = run_range(range(plant.max_seeds), stop_at_first=True)
    assert failures, f"{name}: no seed among the first {plant.max_seeds} caught it"
    print(f"{name} caught by {failures[0].splitlines()[0]}")
