"""The lease journal on its own: what it promises to keep across a crash."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from conveyor.spark import rows
from conveyor.spark.journal import Journal


def test_a_written_batch_is_durable_directory_entry_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch file is fsynced, then renamed: until its directory is fsynced too, a power
    cut can leave the directory without it, and the batch replays empty."""
    journal = Journal(str(tmp_path), "run1")
    synced_directories: list[list[str]] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            synced_directories.append(sorted(p.name for p in journal.directory.iterdir()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    row = ("q", "D-1", b"body", 0, 0, "127.0.0.1:7711", 0)
    journal.write(1, [rows.rows_batch([row])])
    assert ["batch-000000000001.arrow"] in synced_directories
    assert journal.pending() == [1]
