"""The node's GC policy: survivors of a full collection are frozen, garbage is still freed."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import gc, weakref
from conveyor.node import gc_policy
gc_policy.install()
class Node:  # a cycle made before the full collection, dropped before it: still collected
    pass
a = Node(); a.self = a
probe = weakref.ref(a)
del a
keep = [Node() for _ in range(1000)]
gc.collect()
assert probe() is None, "cyclic garbage survived"
assert gc.get_freeze_count() >= 1000, gc.get_freeze_count()
print("ok")
"""


def test_full_collection_freezes_survivors_and_frees_garbage() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
