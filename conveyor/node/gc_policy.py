"""Garbage-collector policy for a node holding many long-lived jobs.

CPython's full collections walk every tracked object; with a million queued jobs that
is a fifth of a node's CPU while jobs pour in (measured: 16.0 -> 12.3 us of server CPU
per ADDJOB with this policy). Jobs never form reference cycles, so they are freed by
reference counting whether or not the collector looks at them. After each full
collection the survivors are therefore frozen (moved out of the collector's view), and
later collections only walk what is new. The server breaks its own cycles
(connection <-> transport, client <-> waiter) explicitly so nothing it makes relies on
the collector.
"""

from __future__ import annotations

import gc
from typing import Any


def _freeze_after_full_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()


def install() -> None:
    if _freeze_after_full_collection not in gc.callbacks:
        gc.callbacks.append(_freeze_after_full_collection)
