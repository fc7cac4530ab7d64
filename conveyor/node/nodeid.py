"""The node's identity: a 40-hex ID made once and kept in nodes.conf.

The file uses the `CLUSTER NODES` line format, as Disque's cluster config does, so the
cluster code can later extend the same file with the other nodes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_ID_RE = re.compile(r"^[0-9a-f]{40}$")


def load_or_create(path: Path, port: int) -> str:
    if path.exists():
        for line in path.read_text().splitlines():
            words = line.split()
            if len(words) >= 3 and "myself" in words[2].split(",") and _ID_RE.match(words[0]):
                return words[0]
    node_id = os.urandom(20).hex()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{node_id} :{port} myself 0 0 connected\n")
    os.replace(tmp, path)
    return node_id
