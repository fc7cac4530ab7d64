"""Queue names, job IDs and message IDs in URLs: their patterns, documented in the OpenAPI
schema, and path convertors for the router.

A job ID is `D-` + 8 hex + `-` + 24 base64 characters + `-` + 4 hex; base64 may hold '/',
so an ID cannot be a plain path segment. A convertor matching exactly that shape lets
`/jobs/<id>` and `/jobs/<id>/ack` coexist without `{id:path}` swallowing the `/ack`.
A message ID in a URL may also have '/' written as '_', as its directory name does.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path
from starlette.convertors import Convertor, register_url_convertor

JOB_ID_RE = r"D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}"
MSG_ID_RE = r"D-[0-9a-f]{8}-[A-Za-z0-9+/_]{24}-[0-9a-f]{4}"
QUEUE_RE = r"[^\x00-\x1f\x7f/]+"
MAX_QUEUE_CHARS = 256  # at most 1024 bytes in UTF-8


class _IdConvertor(Convertor[str]):
    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


class JobIdConvertor(_IdConvertor):
    regex = JOB_ID_RE


class MsgIdConvertor(_IdConvertor):
    regex = MSG_ID_RE


def printable(text: str) -> str:
    """Text from a node or a message's files as text that JSON, HTML and metrics can carry.
    The client decodes a name that is not UTF-8 with surrogate escapes (so it round-trips),
    and JSON may hold a lone surrogate ("\\ud800"): neither can be encoded again. Such a
    byte is shown as `\\xNN`, such a surrogate as `\\uXXXX`."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(_escaped(char) for char in text)
    return text


def _escaped(char: str) -> str:
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for the byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    if 0xD800 <= code <= 0xDFFF:
        return f"\\u{code:04x}"
    return char


register_url_convertor("jobid", JobIdConvertor())
register_url_convertor("msgid", MsgIdConvertor())

QueueName = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_QUEUE_CHARS,
        pattern=f"^{QUEUE_RE}$",
        description="a queue name: no '/' and no control characters",
    ),
]
JobId = Annotated[str, Path(pattern=f"^{JOB_ID_RE}$", description="a job ID, D-…-…-…")]
MsgId = Annotated[
    str, Path(pattern=f"^{MSG_ID_RE}$", description="a message (job) ID; '/' may be '_'")
]
