"""Argument parsing shared by the command handlers, with Redis' strictness.

Redis' string2ll refuses what Python's int() takes ('+1', ' 1', '1_0', '01'), so
clients see the same errors they would from Disque.
"""

from __future__ import annotations

import re

from conveyor.core.errors import CommandError
from conveyor.core.jobid import is_valid_id

_INT_RE = re.compile(rb"-?(0|[1-9][0-9]*)\Z")
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

SYNTAX = "ERR syntax error"
NOT_AN_INTEGER = "ERR value is not an integer or out of range"
TIMEOUT_NOT_INTEGER = "ERR timeout is not an integer or out of range"
TIMEOUT_NEGATIVE = "ERR timeout is negative"


def parse_int(raw: bytes) -> int | None:
    """A 64-bit signed integer written as Redis expects, or None."""
    if len(raw) > 20 or not _INT_RE.match(raw):
        return None
    value = int(raw)
    if value < _INT64_MIN or value > _INT64_MAX:
        return None
    return value


def int_or_error(raw: bytes, message: str = NOT_AN_INTEGER) -> int:
    value = parse_int(raw)
    if value is None:
        raise CommandError(message)
    return value


def parse_timeout_ms(raw: bytes) -> int:
    if raw == b"0":
        return 0  # the common case, on the ADDJOB hot path
    value = parse_int(raw)
    if value is None:
        raise CommandError(TIMEOUT_NOT_INTEGER)
    if value < 0:
        raise CommandError(TIMEOUT_NEGATIVE)
    return value


def check_ids(ids: list[bytes]) -> None:
    """Every ID must be well formed before a multi-ID command does anything."""
    for job_id in ids:
        if not is_valid_id(job_id):
            raise CommandError("BADID Invalid Job ID format.")
