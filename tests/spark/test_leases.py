"""The streaming reader's driver side (`leases.DriverState`) against a real node, without
Spark: what happens to leased jobs when the journal cannot keep them."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import redis

from conveyor.spark import leases
from conveyor.spark.leases import DriverState, LeasedBatch
from conveyor.spark.options import OptionError, parse_read_options
from tests.servers import NodeProcess, running_node
from tests.spark.streams import jobs_on_node


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


def test_jobs_leased_for_a_batch_the_journal_cannot_keep_go_back_to_their_queue(
    node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    # A RETRY far beyond the test: only the hand-back can have queued them again.
    for index in range(20):
        r.execute_command("ADDJOB", "q", f"job-{index}", 0, "RETRY", 3600)
    journal = tmp_path / "journal"
    state = DriverState(parse_read_options(_options(node, journal)), "run1")
    # The journal's temporary file for batch 1 cannot be opened for writing.
    (journal / "run1" / "batch-000000000001.tmp").mkdir(parents=True)
    try:
        with pytest.raises(OSError) as failure:
            state.take(1, 100)
    finally:
        state.stop()
    assert r.execute_command("QLEN", "q") == 20
    assert "cannot journal batch 1" in str(failure.value)
    assert "20 leased jobs were handed back" in str(failure.value)


def _ids(batch: LeasedBatch) -> list[str]:
    # Leased IDs are bytes as the node sent them, journaled ones str.
    return [
        job_id.decode() if isinstance(job_id, bytes) else job_id
        for ids in batch.ids_by_node.values()
        for job_id in ids
    ]


def test_a_restart_prefetches_the_journaled_batch_instead_of_leasing_over_it(
    node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    """The query stopped after the reader leased batch 1 and prefetched batch 2 (both
    journaled) but before Spark logged offset 1: the restarted query plans batch 1 again."""
    for index in range(30):
        r.execute_command("ADDJOB", "q", f"job-{index}", 0, "RETRY", 3600)
    options = parse_read_options(_options(node, tmp_path / "journal"))
    first = DriverState(options, "run1")
    before = _ids(first.take(1, 10))
    first.prefetch(2, 10)
    first.stop()  # waits for the prefetch; with a journal, keeps its batch
    assert first.journal is not None and first.journal.pending() == [1, 2]
    prefetched = _ids(LeasedBatch.from_batches(2, first.journal.load(2) or []))

    second = DriverState(options, "run1")
    try:
        assert _ids(second.take(1, 10)) == before
        second.prefetch(2, 10)
        # Leasing batch 2 afresh overwrote its journal: its first jobs stayed leased.
        assert _ids(second.take(2, 10)) == prefetched
        second.commit(2)
        assert second._ack_future is not None
        second._ack_future.result()
    finally:
        second.stop()
    assert jobs_on_node(r) == 10
    assert r.execute_command("QLEN", "q") == 10


def test_a_node_that_is_down_does_not_hold_back_the_acks_of_the_others(
    node: NodeProcess, r: redis.Redis, tmp_path: Path
) -> None:
    with running_node(tmp_path / "first") as first:
        r_first = first.client()
        for client in (r_first, r):
            for index in range(5):
                client.execute_command("ADDJOB", "q", f"job-{index}", 0, "RETRY", 3600)
        nodes = f"127.0.0.1:{first.port},127.0.0.1:{node.port}"
        state = DriverState(parse_read_options({"nodes": nodes, "queues": "q"}), "run1")
        batch = state.take(1, 100)
        # The node whose acks are tried first goes down after the batch was leased.
        assert list(batch.ids_by_node) == [f"127.0.0.1:{first.port}", f"127.0.0.1:{node.port}"]
    try:
        state.committed_seq = 1
        assert not state._ack_batch(batch)  # retried later, for the node that is down
    finally:
        state.stop()
    # Not left leased, to come back after their RETRY as duplicates, while the other is down.
    assert jobs_on_node(r) == 0
    assert list(batch.ids_by_node) == [f"127.0.0.1:{first.port}"]


def test_commits_while_a_node_is_down_queue_at_most_one_ack_round(tmp_path: Path) -> None:
    with running_node(tmp_path / "gone") as gone:
        name = f"127.0.0.1:{gone.port}"
    state = DriverState(parse_read_options({"nodes": name, "queues": "q"}), "run1")
    try:
        state.pending[1] = LeasedBatch(1, {}, {name: [b"D-00000000-000000000000000000000000-0000"]})
        # The first round keeps retrying the node (for ACK_RETRY_LIMIT_S): one commit per
        # micro-batch queued a round behind it each, without a bound.
        for seq in range(1, 101):
            state.commit(seq)
        assert state._acker._work_queue.qsize() <= 1
    finally:
        state.stop()


def test_stop_waits_only_for_work_that_can_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    """A round stop() cancelled never runs, and concurrent.futures.wait() does not count a
    cancelled future as done until its worker sees it: stop() waited its whole
    STOP_WAIT_S for it."""
    state = DriverState(parse_read_options({"queues": "q"}), "run1")
    waited: list[Future[Any]] = []

    def recording_wait(futures: list[Future[Any]], timeout: float) -> None:
        waited.extend(futures)

    monkeypatch.setattr(leases, "wait", recording_wait)
    busy = threading.Event()
    state._acker.submit(busy.wait)  # the ack thread is busy: the next round has to queue
    try:
        state.commit(1)
        queued = state._ack_future
        state.stop()
    finally:
        busy.set()
    assert queued is not None and queued.cancelled()
    assert not [future for future in waited if future.cancelled()]
