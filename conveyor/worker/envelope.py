"""The message envelope: the JSON body of every queue-script job.

A Conveyor job body is opaque bytes; queue scripts need RQ's message fields, so a message is
a small JSON object. An attachment either travels inside it (base64 + MD5, small files from
`conveyor queue add --attach`) or, as the console stores them, as a reference: a URL, the
size and the MD5. The node then holds a few hundred bytes whatever the file's size, and the
worker that runs the message fetches the file (conveyor.worker.attachments); a `dup` or a
relay copies the reference, not the file.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PARAMS = ("param1", "param2", "param3", "param4")
# An attachment rides in the job body; keep bodies well under the node's bulk limit.
MAX_ATTACHMENT_BYTES = 8 * 1024 * 1024
# Of a body that is no envelope, what its msg.json keeps (the node takes up to 512 MB).
KEPT_BODY_BYTES = 64 * 1024


class EnvelopeError(ValueError):
    """A job body that is not a valid message envelope."""


@dataclass
class Attachment:
    name: str
    data: bytes
    md5: str
    url: str = ""  # set: the data is not here; fetch it from this URL (MD5-checked)
    size: int | None = None  # of a referenced attachment, when known

    @property
    def referenced(self) -> bool:
        return bool(self.url)

    def to_doc(self) -> dict[str, Any]:
        if self.referenced:
            doc: dict[str, Any] = {"name": self.name, "md5": self.md5, "url": self.url}
            if self.size is not None:
                doc["size"] = self.size
            return doc
        return {"name": self.name, "md5": self.md5, "data": base64.b64encode(self.data).decode()}

    @classmethod
    def from_doc(cls, doc: Any) -> Attachment:
        if not isinstance(doc, dict):
            raise EnvelopeError(f"each of 'attachments' must be an object, got {shown(doc)}")
        # name and md5 have no default: null is as wrong as a number (str() made it "None").
        name = _text(doc, "name", "attachment 'name'", required=True)
        # The name as the messages show it: its first 60 characters (it may be any length).
        label = f"attachment {name[:60]!r}"
        md5 = _text(doc, "md5", f"{label} 'md5'", required=True)
        if doc.get("url") is not None:  # a reference; a null url is no url: inline data
            url = _text(doc, "url", f"{label} 'url'")
            return cls(name, b"", md5, url, _whole(doc, "size", f"{label} 'size'"))
        data = _text(doc, "data", f"{label} 'data'", required=True)
        try:
            return cls(name, base64.b64decode(data), md5)
        except ValueError as exc:  # binascii.Error, or a character beyond ASCII
            raise EnvelopeError(f"{label} 'data' is not base64: {exc}") from None

    @classmethod
    def from_file(cls, path: Path, name: str | None = None) -> Attachment:
        data = path.read_bytes()
        if len(data) > MAX_ATTACHMENT_BYTES:
            raise EnvelopeError(f"attachment {path} is larger than {MAX_ATTACHMENT_BYTES} bytes")
        return cls(name or path.name, data, hashlib.md5(data).hexdigest())

    def verify(self) -> None:
        """Check inline data against the MD5; a reference is checked when it is fetched."""
        if self.referenced:
            return
        if hashlib.md5(self.data).hexdigest() != self.md5:
            raise EnvelopeError(f"attachment {self.name!r} failed its MD5 check")


@dataclass
class Envelope:
    params: dict[str, str] = field(default_factory=dict)
    attachments: list[Attachment] = field(default_factory=list)
    origin: str = ""  # full ID of the message this one was cloned/relayed from
    count: int = 0  # runs + relays before this job was created (RQ_COUNT adds deliveries)
    max_count: int = 15
    force_remote: bool = False
    idempotency_key: str = ""  # set on relayed messages; the receiving worker checks it
    tick: int | None = None  # the cron tick (epoch seconds) of a scheduled message
    webhook: str = ""  # http(s) URL the message's final state is POSTed to
    due_at: float | None = None  # epoch seconds it may first run: add-to-deliver latency

    def param(self, number: int) -> str:
        return self.params.get(f"param{number}", "")

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {"params": self.params, "count": self.count}
        if self.attachments:
            doc["attachments"] = [a.to_doc() for a in self.attachments]
        for key in ("origin", "idempotency_key", "webhook"):
            if getattr(self, key):
                doc[key] = getattr(self, key)
        if self.max_count != 15:
            doc["max_count"] = self.max_count
        if self.force_remote:
            doc["force_remote"] = True
        if self.tick is not None:
            doc["tick"] = self.tick
        if self.due_at is not None:
            doc["due_at"] = round(self.due_at, 3)
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, body: bytes) -> Envelope:
        try:
            # Numbers keep their text: a param of 1.50 is "1.50" to the script, not "1.5".
            doc = json.loads(body, parse_int=_JsonInt, parse_float=_JsonFloat)
        # ValueError: also an integer of more digits than int() reads (4300).
        except (UnicodeDecodeError, ValueError) as exc:
            raise EnvelopeError(f"job body is not JSON: {exc}") from None
        except RecursionError:  # "[[[[..." deeper than the interpreter's stack
            raise EnvelopeError("job body is JSON nested too deeply") from None
        if not isinstance(doc, dict):
            raise EnvelopeError("job body is not a JSON object")
        params = doc.get("params")
        params = {} if params is None else params
        if not isinstance(params, dict) or any(k not in PARAMS for k in params):
            raise EnvelopeError("'params' must map param1..param4 to strings")
        try:
            texts = {key: param_text(value, repr(key)) for key, value in params.items()}
        except ValueError as exc:
            raise EnvelopeError(str(exc)) from None
        if any("\x00" in text for text in texts.values()):
            # Params become env vars, which cannot hold a NUL: the script could never start.
            raise EnvelopeError("a param holds a NUL byte; scripts get params as env vars")
        attachment_docs = doc.get("attachments")
        if attachment_docs is not None and not isinstance(attachment_docs, list):
            raise EnvelopeError(f"'attachments' must be a list, got {shown(attachment_docs)}")
        # Absent or null: the default (a null webhook is no webhook). Any other JSON type
        # is refused: str() made null "None" (a webhook URL, a given-up delivery), bool()
        # made "false" true, int() read 2.7 as 2, true as 1 and "3" as 3.
        max_count = _whole(doc, "max_count")
        return cls(
            params=texts,
            attachments=[Attachment.from_doc(a) for a in attachment_docs or []],
            origin=_text(doc, "origin"),
            count=_whole(doc, "count") or 0,
            max_count=15 if max_count is None else max_count,
            force_remote=_flag(doc, "force_remote"),
            idempotency_key=_text(doc, "idempotency_key"),
            tick=_whole(doc, "tick"),
            webhook=_text(doc, "webhook"),
            due_at=_finite(doc, "due_at"),
        )

    def clone(self) -> Envelope:
        """A copy for `dup`: same params and attachments (references stay references),
        count reset as RQ does. Not the webhook: it was asked for the original message."""
        return Envelope(
            params=dict(self.params),
            attachments=list(self.attachments),
            origin=self.origin,
            max_count=self.max_count,
        )


def bad_body_doc(job_id: str, body: bytes) -> dict[str, Any]:
    """msg.json of a job whose body is no envelope: its first KEPT_BODY_BYTES (enough to
    see what a producer sent) and its size. Kept whole, each bad body of up to the node's
    512 MB would be copied to the worker's disk, until it filled."""
    doc: dict[str, Any] = {"id": job_id, "body": body[:KEPT_BODY_BYTES].decode("latin-1")}
    if len(body) > KEPT_BODY_BYTES:
        doc["body_size"] = len(body)
        doc["body_note"] = f"the first {KEPT_BODY_BYTES} of {len(body)} bytes"
    return doc


class _JsonText:
    """A parsed JSON number that remembers its text: json.loads' parse_int (an int) and
    parse_float (a float, for a fraction or an exponent) make them."""

    text: str

    def __new__(cls, text: str) -> Any:
        number = super().__new__(cls, text)  # type: ignore[call-arg]
        number.text = text
        return number


class _JsonInt(_JsonText, int):
    """A JSON integer and its text."""


class _JsonFloat(_JsonText, float):
    """A JSON number with a fraction or exponent, and its text."""


def param_text(value: Any, where: str) -> str:
    """What a script gets as RQ_PARAMn for a param of JSON value `value`: a string as it
    is, a number as its JSON text (`3`, `1.50`). null, true/false, lists and objects are
    refused: str() made them "None", "True" and Python reprs, never what was meant; so
    are NaN and Infinity, which JSON does not have."""
    if isinstance(value, str):
        return value
    if isinstance(value, _JsonInt | _JsonFloat):
        return value.text
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return json.dumps(value)
    raise ValueError(
        f"{where} must be a string or a number (params are the script's RQ_PARAMn "
        f"environment variables), got {shown(value)}"
    )


def shown(value: Any) -> str:
    """A JSON value as an error message shows it, on one line and short: a number as
    written, null/true/false/NaN and (cut) strings as JSON, lists and objects by kind."""
    if isinstance(value, dict | list):
        return "an object" if isinstance(value, dict) else "a list"
    # json.dumps escapes newlines: the reason stays one line.
    text = value.text if isinstance(value, _JsonText) else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."  # a number of 4300 digits too


def _text(doc: dict[str, Any], key: str, where: str = "", required: bool = False) -> str:
    value = doc.get(key)
    if isinstance(value, str):
        return value
    if value is None and not required:
        return ""
    got = shown(value) if key in doc else "nothing"
    raise EnvelopeError(f"{where or repr(key)} must be a string, got {got}")


def _whole(doc: dict[str, Any], key: str, where: str = "") -> int | None:
    value = doc.get(key)
    # A float, even 2.0 or 1e999 (int() cut them, or raised OverflowError), is refused.
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise EnvelopeError(f"{where or repr(key)} must be an integer, got {shown(value)}")
    if value < 0:  # counts and sizes: -1 runs, or fetches of "more than its -1 bytes"
        raise EnvelopeError(f"{where or repr(key)} must not be negative, got {shown(value)}")
    return int(value)  # a plain int, not the parsed _JsonInt


def _flag(doc: dict[str, Any], key: str) -> bool:
    value = doc.get(key)
    if value is None or isinstance(value, bool):
        return bool(value)
    raise EnvelopeError(f"{key!r} must be true or false, got {shown(value)}")


def _finite(doc: dict[str, Any], key: str) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    # Infinity would end up in the latency histogram's sum, and stay there; float() also
    # read "5" and true.
    number = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer of 309 digits or more
            pass
    if not math.isfinite(number):
        raise EnvelopeError(f"{key!r} must be a finite number, got {shown(value)}")
    return number
