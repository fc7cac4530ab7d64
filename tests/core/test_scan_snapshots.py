"""QSCAN/JSCAN snapshots on a long-running node: a scan given up must not keep its keys.

A scan takes a snapshot of the keys at cursor 0 (core/scan.py). A client that stops
paging (the console's purge stops at its cap, a script dies) would otherwise keep every
ID the snapshot saw, jobs long gone included, in up to 16 snapshots that no memory
figure counts. A virtual clock drives the core, as in test_longrun_timers.
"""

from __future__ import annotations

from conveyor.core.node import NodeCore
from conveyor.core.scan import SNAPSHOT_IDLE_MS
from tests.core.test_longrun_timers import T0, held_elsewhere, make_core, run_until


def everything(_: object) -> bool:
    return True


def scan_timers(core: NodeCore) -> int:
    """Calls pending for the scans (a cancelled one waits in the heap, counting nothing)."""
    return sum(1 for _, callback, _ in core.timers.pending_calls() if callback == core._scan_gc)


def test_a_scan_given_up_lets_its_keys_go_once_idle() -> None:
    core = make_core()
    ids = [core.add_default_job(b"q", b"x", T0).id for _ in range(100)]
    cursor, page = core.scan_jobs(0, 10, False, everything, T0)
    assert cursor != 0 and len(page) == 10
    assert core.ack(ids, T0) == 100
    del page
    run_until(core, T0 + SNAPSHOT_IDLE_MS - 1)
    assert held_elsewhere(ids) == 100, "dropped before it was idle that long"
    run_until(core, T0 + SNAPSHOT_IDLE_MS)
    assert held_elsewhere(ids) == 0
    assert scan_timers(core) == 0
    # The cursor still works: a fresh snapshot, from the same position (nothing left).
    assert core.scan_jobs(cursor, 10, False, everything, T0 + SNAPSHOT_IDLE_MS) == (0, [])


def test_a_scan_paged_through_slowly_keeps_its_snapshot() -> None:
    """Each call restarts the idle time: a scan that pages every 50 s returns every job
    that exists for the whole scan, once, while jobs come and go."""
    core = make_core()
    ids = [core.add_default_job(b"q", b"x", T0).id for _ in range(30)]
    now, cursor, seen = T0, 0, []
    while True:
        cursor, page = core.scan_jobs(cursor, 10, False, everything, now)
        seen.extend(page)
        if cursor == 0:
            break
        core.add_default_job(b"q", b"later", now)  # not in the snapshot
        now += 50_000
        run_until(core, now)
    assert sorted(seen) == sorted(ids)
    assert scan_timers(core) == 0  # its timer went with the scan's end


def test_queue_scans_are_dropped_alike() -> None:
    core = make_core()
    for n in range(30):
        core.add_default_job(b"q%d" % n, b"x", T0)
    cursor, _ = core.scan_queues(0, 10, False, everything, T0)
    assert cursor != 0 and len(core._scans) == 1 and scan_timers(core) == 1
    run_until(core, T0 + SNAPSHOT_IDLE_MS)
    assert len(core._scans) == 0
