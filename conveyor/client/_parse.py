"""Turning raw RESP2 replies (as redis-py returns them, bytes undecoded) into Python values.

Pure functions, shared by the sync and the async client. Text is decoded as UTF-8 with
`surrogateescape`, so a queue name that is not valid UTF-8 still round-trips: the clients
encode arguments with the same error handler.
"""

from __future__ import annotations

import re
from typing import Any

from conveyor.client.job import Hello, Job, NodeInfo

ENCODING = "utf-8"
ENCODING_ERRORS = "surrogateescape"

_INT_RE = re.compile(r"-?(0|[1-9][0-9]*)\Z")
_FLOAT_RE = re.compile(r"-?[0-9]+\.[0-9]+\Z")


def text(value: Any) -> str:
    """A bulk or status reply as str."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode(ENCODING, ENCODING_ERRORS)
    return str(value)


def optional_text(value: Any) -> str | None:
    return None if value is None else text(value)


def to_bytes(value: bytes | bytearray | memoryview | str) -> bytes:
    """A job body or argument as bytes (str is UTF-8 encoded)."""
    if isinstance(value, str):
        return value.encode(ENCODING, ENCODING_ERRORS)
    return bytes(value)


def jobs(reply: Any, with_counters: bool = False) -> list[Job]:
    """GETJOB / QPEEK: a list of [queue, id, body] or the 7-element WITHCOUNTERS form."""
    if reply is None:
        return []
    if not with_counters:
        # The consumer's hot path: hiredis gives bytes, decoded once per field.
        try:
            return [
                Job(queue.decode(ENCODING, ENCODING_ERRORS), job_id.decode("ascii"), body)
                for queue, job_id, body in reply
            ]
        except (AttributeError, TypeError, ValueError):
            pass  # not the plain bytes shape: the general path below copes
    result: list[Job] = []
    for item in reply:
        if with_counters and len(item) >= 7:
            counters = {text(item[i]): item[i + 1] for i in range(3, len(item) - 1, 2)}
            nacks: int | None = int(counters.get("nacks", 0))
            additional: int | None = int(counters.get("additional-deliveries", 0))
        else:
            nacks = additional = None
        result.append(Job(text(item[0]), text(item[1]), bytes(item[2]), nacks, additional))
    return result


def _natural(key: str, value: Any, keep_bytes: frozenset[str]) -> Any:
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, list):
        return [_natural(key, item, frozenset()) for item in value]
    if key in keep_bytes:
        return bytes(value)
    return text(value)


def pairs(reply: Any, keep_bytes: frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """A flat [key, value, key, value...] array (SHOW, QSTAT) as a dict with str keys.

    Integers stay int, null stays None, nested arrays become lists of str, bulk strings
    become str except the keys in `keep_bytes`, which stay bytes.
    """
    if reply is None:
        return None
    result: dict[str, Any] = {}
    for index in range(0, len(reply) - 1, 2):
        key = text(reply[index])
        result[key] = _natural(key, reply[index + 1], keep_bytes)
    return result


_SHOW_BYTES = frozenset({"body"})


def show(reply: Any) -> dict[str, Any] | None:
    """SHOW: None for an unknown job, else its 15 fields; `body` stays bytes."""
    return pairs(reply, _SHOW_BYTES)


def info_value(raw: str) -> Any:
    if _INT_RE.match(raw):
        return int(raw)
    if _FLOAT_RE.match(raw):
        return float(raw)
    if "=" in raw and ":" not in raw:
        # cmdstat_x:calls=1,usec=2,usec_per_call=2.00
        fields: dict[str, Any] = {}
        for part in raw.split(","):
            name, sep, value = part.partition("=")
            if not sep:
                return raw
            fields[name] = info_value(value)
        return fields
    return raw


def info(reply: Any) -> dict[str, Any]:
    """INFO text as a flat dict: `{"registered_jobs": 3, "cmdstat_ping": {...}, ...}`."""
    result: dict[str, Any] = {}
    for line in text(reply).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if sep:
            result[key] = info_value(value)
    return result


def hello(reply: Any, connected_host: str) -> Hello:
    """HELLO: [version, my id, [id, ip, port, priority]...]; an empty ip means "where
    you connected to" (a node that never met another does not know its own address)."""
    version = int(reply[0])
    node_id = text(reply[1])
    nodes: list[NodeInfo] = []
    for entry in reply[2:]:
        host = text(entry[1]) or connected_host
        nodes.append(NodeInfo(text(entry[0]), host, int(entry[2]), int(entry[3])))
    return Hello(version, node_id, nodes)


def scan(reply: Any) -> tuple[str, list[str]]:
    """QSCAN / JSCAN: [cursor, [items...]] with the cursor as a bulk string."""
    return text(reply[0]), [text(item) for item in reply[1]]
