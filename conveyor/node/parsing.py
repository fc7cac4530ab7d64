"""Argument parsing shared by the command handlers, with Redis' strictness.

Redis' string2ll refuses what Python's int() takes ('+1', ' 1', '1_0', '01', '-0'), so
clients see the same errors they would from Disque.
"""

from __future__ import annotations

import re

from conveyor.core import errors
from conveyor.core.errors import CommandError
from conveyor.core.jobid import is_valid_id

# No "-0" either: string2ll wants a digit 1-9 after the sign.
_INT_RE = re.compile(rb"(0|-?[1-9][0-9]*)\Z")
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

SYNTAX = "ERR syntax error"
NOT_AN_INTEGER = "ERR value is not an integer or out of range"
TIMEOUT_NOT_INTEGER = "ERR timeout is not an integer or out of range"
TIMEOUT_NEGATIVE = "ERR timeout is negative"


# The last integers parsed, by their bytes: producers send the same TIMEOUT, REPLICATE,
# RETRY and TTL with every job, so most parses are a dict look-up. Emptied when full.
_RECENT_INTS_MAX = 256
_recent_ints: dict[bytes, int] = {}


def parse_int(raw: bytes) -> int | None:
    """A 64-bit signed integer written as Redis expects, or None."""
    exact = type(raw) is bytes
    if exact:
        value = _recent_ints.get(raw)
        if value is not None:
            return value
    if len(raw) > 20 or not _INT_RE.match(raw):
        return None
    value = int(raw)
    if value < _INT64_MIN or value > _INT64_MAX:
        return None
    if exact:
        if len(_recent_ints) >= _RECENT_INTS_MAX:
            _recent_ints.clear()
        _recent_ints[raw] = value
    return value


def option_codes(codes: dict[bytes, int]) -> dict[bytes, int]:
    """Option name -> code, spelled in lower and in upper case. Handlers look the exact
    bytes up first and `.lower()` them only on a miss: clients send one case or the
    other, and `.lower()` allocates on every option of every request."""
    return {spelling: code for name, code in codes.items() for spelling in (name, name.upper())}


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
    if not all(map(is_valid_id, ids)):
        raise CommandError(errors.BADID)


class ScanArgs:
    """QSCAN/JSCAN arguments: the shared cursor/COUNT/BUSYLOOP plus per-command options."""

    __slots__ = ("busyloop", "count", "cursor", "values")

    def __init__(self) -> None:
        self.cursor = 0
        self.count = 100
        self.busyloop = False
        # option (lower case) -> every value given for it, in order
        self.values: dict[bytes, list[bytes]] = {}


def parse_scan_args(args: list[bytes], value_options: frozenset[bytes]) -> ScanArgs:
    parsed = ScanArgs()
    cursor_seen = False
    argc = len(args)
    index = 1
    while index < argc:
        option = args[index].lower()
        has_value = index + 1 < argc
        if option == b"count" and has_value:
            parsed.count = int_or_error(args[index + 1])
            if parsed.count < 1:
                raise CommandError("ERR COUNT must be > 0")
            index += 1
        elif option == b"busyloop":
            parsed.busyloop = True
        elif option in value_options and has_value:
            parsed.values.setdefault(option, []).append(args[index + 1])
            index += 1
        else:
            if cursor_seen:
                raise CommandError(SYNTAX)
            parsed.cursor = parse_cursor(args[index])
            cursor_seen = True
        index += 1
    return parsed


def parse_cursor(raw: bytes) -> int:
    if not raw.isdigit() or len(raw) > 20 or int(raw) >= 2**64:
        raise CommandError("ERR invalid cursor or option name")
    return int(raw)
