"""Job IDs: `D-` + 8 hex of the node ID + `-` + 24 chars of random + `-` + 4 hex TTL minutes.

The random part is 144 bits (exactly 24 base64 characters, so no padding) of a SHAKE-128
stream keyed by the node's seed: unguessable without the seed, as Disque's SHA1 of a
secret seed and a counter is. The stream is drawn and base64-encoded 512 IDs at a time,
so an ID costs a slice and a join on the ADDJOB path, not a hash. The seed is passed in,
never read from the OS here, so a simulator can make IDs reproducible.
"""

from __future__ import annotations

import binascii
import hashlib
import struct

from conveyor.core.job_alloc import new_ids

_pack_counter = struct.Struct("<Q").pack
_b2a_base64 = binascii.b2a_base64
_RANDOM_CHARS = 24  # a 40-char ID's random part: 18 bytes in base64
_BLOCK_CHARS = _RANDOM_CHARS * 512

JOB_ID_LEN = 40
# Disque caps the TTL digits at what four hex digits hold.
_MAX_TTL_MINUTES = 0xFFFF


class JobIdGenerator:
    """Makes unique job IDs for one node."""

    __slots__ = ("_block", "_chars", "_next", "_prefix", "_suffixes", "seed")

    def __init__(self, node_id: str, seed: bytes) -> None:
        self._prefix = f"D-{node_id[:8]}-".encode()
        self.seed = seed
        self._block = 0  # blocks of the stream drawn so far
        self._chars = b""  # the current block, base64
        self._next = _BLOCK_CHARS  # where the next ID's characters start in it
        # (ttl, retry) -> b"-05a1": producers use few distinct TTLs, so format each once.
        self._suffixes: dict[tuple[int, int], bytes] = {}

    def next_id(self, ttl_s: int, retry_s: int) -> bytes:
        suffix = self._suffixes.get((ttl_s, retry_s))
        if suffix is None:
            suffix = self.suffix_for(ttl_s, retry_s)
        start = self._next
        if start >= _BLOCK_CHARS:
            self._draw()
            start = 0
        end = self._next = start + _RANDOM_CHARS
        return b"".join((self._prefix, self._chars[start:end], suffix))

    def next_ids(self, ttl_s: int, retry_s: int, count: int) -> list[bytes]:
        """`count` IDs, as `count` calls of next_id would make them (a run of ADDJOBs)."""
        suffix = self._suffixes.get((ttl_s, retry_s))
        if suffix is None:
            suffix = self.suffix_for(ttl_s, retry_s)
        start = self._next
        if start >= _BLOCK_CHARS:
            self._draw()
            start = 0
        # As many as the block still holds, in one call (compiled: core/job_alloc.py).
        room = (_BLOCK_CHARS - start) // _RANDOM_CHARS
        if count <= room:  # the usual case
            self._next = start + count * _RANDOM_CHARS
            return new_ids(self._prefix, self._chars, start, count, _RANDOM_CHARS, suffix)
        ids = new_ids(self._prefix, self._chars, start, room, _RANDOM_CHARS, suffix)
        self._next = _BLOCK_CHARS
        return ids + self.next_ids(ttl_s, retry_s, count - room)

    def suffix_for(self, ttl_s: int, retry_s: int) -> bytes:
        """The `-05a1` tail of IDs for these times (formatted once per distinct pair)."""
        suffix = b"-%04x" % ttl_digits(ttl_s, retry_s)
        if len(self._suffixes) < 1024:
            self._suffixes[(ttl_s, retry_s)] = suffix
        return suffix

    def _draw(self) -> None:
        # Block n of the stream is SHAKE-128(seed || n): blocks never overlap, and the
        # base64 of a multiple of 3 bytes has no padding, so the IDs' 24 characters are
        # consecutive slices.
        self._block += 1
        stream = hashlib.shake_128(self.seed + _pack_counter(self._block))
        self._chars = _b2a_base64(stream.digest(_BLOCK_CHARS // 4 * 3), newline=False)


def ttl_digits(ttl_s: int, retry_s: int) -> int:
    """The TTL in minutes as encoded in an ID: odd when the job has retries, even if not.

    The parity lets any node tell an at-most-once job from its ID alone, which decides
    whether an ACK for an unknown ID is worth remembering (a "dummy ACK").
    """
    minutes = min(ttl_s // 60, _MAX_TTL_MINUTES)
    return minutes | 1 if retry_s > 0 else minutes & ~1


def is_valid_id(job_id: bytes) -> bool:
    # The same structural check Disque does: length and the fixed characters only.
    return (
        len(job_id) == JOB_ID_LEN
        and job_id[0] == 68  # 'D'
        and job_id[1] == 45  # '-'
        and job_id[10] == 45
        and job_id[35] == 45
    )


def id_ttl_minutes(job_id: bytes) -> int | None:
    """The TTL digits of a valid ID, or None when they are not hex."""
    try:
        return int(job_id[36:40], 16)
    except ValueError:
        return None


def id_has_retry(job_id: bytes) -> bool:
    minutes = id_ttl_minutes(job_id)
    return minutes is not None and minutes & 1 == 1
