"""The `conveyor analyze` benchmark's synthetic log has the node's format (no Spark needed:
the benchmark itself reports a log Spark did not read whole)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench.analyze_bench import generate
from conveyor.node.event_log import EVENTS

KEYS = ["time_ms", "node", "event", "id", "queue", "nacks", "additional_deliveries"]
FILE_NAME = re.compile(r"events-\d{8}T\d{2}-[0-9a-f]{8}\.jsonl")


def test_the_log_has_the_nodes_line_format_file_names_and_order(tmp_path: Path) -> None:
    written = generate(tmp_path, 3000)
    assert abs(written["lines"] - 3000) < 100
    lines = 0
    for path in tmp_path.iterdir():
        assert FILE_NAME.fullmatch(path.name), path.name
        times = []
        for text in path.read_text().splitlines():
            event = json.loads(text)
            assert list(event) == KEYS  # the key order the node writes
            assert event["event"] in EVENTS
            assert event["node"][:8] == path.name[-14:-6]
            times.append(event["time_ms"])
        assert times == sorted(times)  # a node appends in time order
        lines += len(times)
    assert lines == written["lines"]
    lives = {"acked", "nacked", "retried", "expired", "dead"}
    assert sum(written[life] for life in lives) == written["jobs"]
