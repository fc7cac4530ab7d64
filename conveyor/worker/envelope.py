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
    def from_doc(cls, doc: dict[str, Any]) -> Attachment:
        if "url" in doc:
            size = doc.get("size")
            return cls(str(doc["name"]), b"", str(doc["md5"]), str(doc["url"]),
                       None if size is None else int(size))  # fmt: skip
        return cls(str(doc["name"]), base64.b64decode(doc["data"]), str(doc["md5"]))

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
        params = doc.get("params", {})
        if not isinstance(params, dict) or any(k not in PARAMS for k in params):
            raise EnvelopeError("'params' must map param1..param4 to strings")
        try:
            texts = {key: param_text(value, repr(key)) for key, value in params.items()}
        except ValueError as exc:
            raise EnvelopeError(str(exc)) from None
        if any("\x00" in text for text in texts.values()):
            # Params become env vars, which cannot hold a NUL: the script could never start.
            raise EnvelopeError("a param holds a NUL byte; scripts get params as env vars")
        try:
            attachments = [Attachment.from_doc(a) for a in doc.get("attachments", [])]
            return cls(
                params=texts,
                attachments=attachments,
                origin=str(doc.get("origin", "")),
                count=int(doc.get("count", 0)),
                max_count=int(doc.get("max_count", 15)),
                force_remote=bool(doc.get("force_remote", False)),
                idempotency_key=str(doc.get("idempotency_key", "")),
                tick=None if doc.get("tick") is None else int(doc["tick"]),
                webhook=str(doc.get("webhook", "")),
                due_at=None if doc.get("due_at") is None else _finite(doc["due_at"]),
            )
        # OverflowError: int() of a number JSON allows but no int is (1e999 is infinity).
        except (KeyError, TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise EnvelopeError(f"bad envelope field: {exc}") from None

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
    if isinstance(value, dict | list):
        kind = "an object" if isinstance(value, dict) else "a list"
    else:
        kind = json.dumps(value)  # null, true, false, NaN, Infinity
    raise ValueError(
        f"{where} must be a string or a number (params are the script's RQ_PARAMn "
        f"environment variables), got {kind}"
    )


def _finite(value: Any) -> float:
    # Infinity would end up in the latency histogram's sum, and stay there.
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not a finite number")
    return number
