"""Prints the simulator's totals at the end of a pytest run that ran seeds."""

from __future__ import annotations

from typing import Any

from tests.sim.ledger import Totals

RESULTS: dict[str, Any] = {"totals": Totals(), "seeds": 0, "seconds": 0.0, "failed": []}


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RESULTS["seeds"]:
        return
    terminalreporter.write_line(
        f"simulator: {RESULTS['seeds']} seeds in {RESULTS['seconds']:.1f} s, "
        f"{len(RESULTS['failed'])} failing {RESULTS['failed'][:20]}"
    )
    terminalreporter.write_line(f"simulator totals: {RESULTS['totals'].line()}")
