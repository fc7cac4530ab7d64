"""The node's identity: a 40-hex ID made once and kept in nodes.conf, one node per file.

The file uses the `CLUSTER NODES` line format, as Disque's cluster config does, so the
cluster code can later extend the same file with the other nodes.

As Redis Cluster does with its nodes.conf, the process holds an exclusive `flock` on the
file from `load_or_create` until it exits, so a second node started on the same file (the
same data directory) stops at start-up (`NodeIdLockError`) instead of serving under the
same identity. The file is only ever replaced whole (written beside it, locked, then
renamed over it), so the lock moves with it: `reset` (CLUSTER RESET HARD) never leaves the
path unlocked. A node that calls `load_or_create` again after unlinking the file gets a
new, locked file and lets the old lock go.
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
from pathlib import Path

_ID_RE = re.compile(r"^[0-9a-f]{40}$")

# Resolved path -> the descriptor whose flock this process holds on the file there.
_held: dict[Path, int] = {}
_guard = threading.Lock()


class NodeIdLockError(Exception):
    """The cluster configuration file is locked by another process (or cannot be locked)."""


def _in_use(path: Path) -> str:
    return (
        f"Sorry, the cluster configuration file {path} is already used by a different "
        "Conveyor node. Please make sure that different nodes use different cluster "
        "configuration files."
    )


def _flock(fd: int, path: Path) -> None:
    """Lock `fd` for good, or close it and raise NodeIdLockError."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise NodeIdLockError(_in_use(path)) from None
    except OSError as exc:  # e.g. a filesystem without locks
        os.close(fd)
        raise NodeIdLockError(f"Impossible to lock {path}: {exc.strerror or exc}") from None


def _is_at(fd: int, path: Path) -> bool:
    """Whether the file open as `fd` is still the one at `path`."""
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    there = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _open_locked(path: Path) -> int:
    """A locked descriptor on the file at `path`, created empty if missing."""
    for _ in range(10):
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        _flock(fd, path)
        if _is_at(fd, path):
            return fd
        os.close(fd)  # replaced between open and lock (by its owner): try the new one
    raise NodeIdLockError(_in_use(path))


def _read_id(path: Path) -> str | None:
    # A damaged byte elsewhere in the file must not cost the node its ID (nor stop it with
    # a traceback): the ID is ASCII, and the cluster's own load says the rest is damaged.
    for line in path.read_bytes().decode(errors="replace").splitlines():
        words = line.split()
        if len(words) >= 3 and "myself" in words[2].split(",") and _ID_RE.match(words[0]):
            return words[0]
    return None


def _write_locked(path: Path, node_id: str, port: int) -> int:
    """Put a new file holding `node_id` at `path`, locked before it appears there."""
    return _write_text_locked(path, f"{node_id} :{port} myself 0 0 connected\n")


def _write_text_locked(path: Path, text: str) -> int:
    """Put a new file holding `text` at `path`, locked before it appears there."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else has it
        os.write(fd, text.encode())
        os.fsync(fd)
        os.replace(tmp, path)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    return fd


def load_or_create(path: Path, port: int) -> str:
    """The node ID kept in `path` (a new one if it holds none), with the file locked for
    the life of the process. NodeIdLockError when another process holds the file."""
    key = path.resolve()
    with _guard:
        fd = _held.get(key)
        if fd is not None and _is_at(fd, key):
            node_id = _read_id(key)
            if node_id is not None:
                return node_id
            return _replace(key, fd, port)
        # Not held yet, or the held file was removed or replaced since: lock what is there
        # now before letting the old one go, so the path is never free in between.
        key.parent.mkdir(parents=True, exist_ok=True)
        new_fd = _open_locked(key)
        try:
            node_id = _read_id(key)
        except BaseException:
            os.close(new_fd)
            raise
        if node_id is None:
            return _replace(key, new_fd, port, stale=fd)
        _held[key] = new_fd
        if fd is not None:
            os.close(fd)
        return node_id


def reset(path: Path, port: int) -> str:
    """A new node ID in `path` (CLUSTER RESET HARD); the file stays locked throughout."""
    key = path.resolve()
    with _guard:
        fd = _held.get(key)
        if fd is not None and _is_at(fd, key):
            return _replace(key, fd, port)
        key.parent.mkdir(parents=True, exist_ok=True)
        return _replace(key, _open_locked(key), port, stale=fd)


def _replace(key: Path, fd: int, port: int, stale: int | None = None) -> str:
    """Write a new ID over the file `fd` locks; hold the new file, release `fd` and `stale`."""
    node_id = os.urandom(20).hex()
    try:
        new_fd = _write_locked(key, node_id, port)
    except BaseException:
        if _held.get(key) != fd:
            os.close(fd)
        raise
    _held[key] = new_fd
    for old in {held for held in (fd, stale) if held is not None and held != new_fd}:
        os.close(old)
    return node_id


def save(path: Path, text: str) -> None:
    """Replace the file with `text` (the whole cluster view, `myself` line included),
    keeping it locked throughout: the new file is locked before the rename."""
    key = path.resolve()
    with _guard:
        new_fd = _write_text_locked(key, text)
        old = _held.get(key)
        _held[key] = new_fd
        if old is not None and old != new_fd:
            os.close(old)


def release(path: Path) -> None:
    """Let the file go (tests; a process exiting releases it anyway)."""
    with _guard:
        fd = _held.pop(path.resolve(), None)
        if fd is not None:
            os.close(fd)
