"""The streaming reader's driver side (`leases.DriverState`) against a real node, without
Spark: what happens to leased jobs when the journal cannot keep them."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from conveyor.spark.leases import DriverState
from conveyor.spark.options import OptionError, parse_read_options
from tests.servers import NodeProcess


def _options(node: NodeProcess, journal: Path) -> dict[str, str]:
    return {"nodes": f"127.0.0.1:{node.port}", "queues": "q", "journal": str(journal)}


def test_a_journal_option_naming_a_file_fails_before_anything_is_leased(
    node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    for index in range(5):
        r.execute_command("ADDJOB", "q", f"job-{index}", 0)
    a_file = tmp_path / "not-a-directory"
    a_file.write_text("")
    options = parse_read_options(_options(node, a_file))
    with pytest.raises(OptionError, match="option journal: cannot use"):
        DriverState(options, "run1").take(1, 100)
    assert r.execute_command("QLEN", "q") == 5
