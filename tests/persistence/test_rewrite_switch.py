"""The switch to a rewritten file, driven in-process (as test_audit_rewrite_cancel.py:
a real event loop and real files; the rewrite thread's fsync waits for the test, so a
write can fail exactly between the new file's fsync and its rename, which a real process
cannot be made to hit every time).

- a write the new file cannot take before its rename fails the rewrite alone: no
  MISCONF, the rename never happens, the old AOF keeps every record;
- a rename that succeeded is the switch, whatever the directory's fsync says after it:
  the node must append to the renamed file, not to the old one it replaced.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import conveyor.persistence.rewrite
from conveyor.node.aof_rewrite import STARTED
from tests.persistence.test_audit_rewrite_cancel import BODY, GatedFile, Node

JOBS = 50


class FullFile(GatedFile):
    """A rewrite's file on a disk that is full for it while `full` is set (not once it
    is the live AOF: the first one, written by appendonly yes, is one of these too)."""

    full = False

    def flush(self) -> bool:
        if FullFile.full and self.pending and self.path.name.startswith("temp-rewriteaof"):
            data = b"".join(self.pending)
            return self._failed(data, 0, OSError(errno.ENOSPC, "No space left on device"))
        return super().flush()


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    GatedFile.gate = threading.Event()
    FullFile.full = False
    monkeypatch.setattr(conveyor.persistence.rewrite, "AppendFile", FullFile)
    node = Node(tmp_path)
    node.set_appendonly("yes")
    GatedFile.gate.set()
    assert node.spin(lambda: node.driver.live is not None)
    node.add_jobs(JOBS)
    node.one_round()
    GatedFile.gate = threading.Event()
    try:
        yield node
    finally:
        node.close()


def added(node: Node, body: bytes) -> bytes:
    node.conn.data_received(b"ADDJOB q %s 0\r\n" % body)
    node.one_round()  # the round's write
    return body


def test_a_write_failing_before_the_rename_fails_the_rewrite_alone(node: Node) -> None:
    driver = node.driver
    assert driver.bgrewrite() == STARTED
    assert node.spin(lambda: driver.rewrite_finishing)  # its fsync waits for the gate
    FullFile.full = True
    late = added(node, b"late-job")
    assert not driver.failed  # no MISCONF: the old file took the record
    GatedFile.gate.set()
    node.drain_rewrite_thread()
    assert node.spin(lambda: driver.rewrite is None)
    assert not driver.last_bgrewrite_ok
    assert not list(driver.path.parent.glob("temp-rewriteaof-*"))
    after = added(node, b"after-job")
    assert not driver.failed
    content = driver.path.read_bytes()  # the old file, still the AOF, appended to
    assert content.count(BODY) == JOBS and late in content and after in content

    FullFile.full = False
    assert driver.bgrewrite() == STARTED
    assert node.spin(lambda: driver.rewrite is None)
    assert driver.last_bgrewrite_ok
    content = driver.path.read_bytes()
    assert content.count(BODY) == JOBS and late in content and after in content


def test_after_the_rename_the_node_appends_to_the_renamed_file(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    def directory_fsync_fails(path: Path) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(conveyor.persistence.rewrite, "fsync_directory", directory_fsync_fails)
    driver = node.driver
    GatedFile.gate.set()
    assert driver.bgrewrite() == STARTED
    assert node.spin(lambda: driver.rewrite is None)
    after = added(node, b"after-job")
    assert not driver.failed
    content = driver.path.read_bytes()  # the renamed file is the AOF: it has the new job
    assert content.count(BODY) == JOBS and after in content
