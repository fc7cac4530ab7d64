"""The message envelope: the JSON body of every queue-script job.

A Conveyor job body is opaque bytes; queue scripts need RQ's message fields, so a message is
a small JSON object. Attachments travel inside it (base64 + MD5) so that a message taken by
a worker on another host, duplicated or relayed to another cluster arrives complete.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PARAMS = ("param1", "param2", "param3", "param4")
# An attachment rides in the job body; keep bodies well under the node's bulk limit.
MAX_ATTACHMENT_BYTES = 8 * 1024 * 1024


class EnvelopeError(ValueError):
    """A job body that is not a valid message envelope."""


@dataclass
class Attachment:
    name: str
    data: bytes
    md5: str

    @classmethod
    def from_file(cls, path: Path, name: str | None = None) -> Attachment:
        data = path.read_bytes()
        if len(data) > MAX_ATTACHMENT_BYTES:
            raise EnvelopeError(f"attachment {path} is larger than {MAX_ATTACHMENT_BYTES} bytes")
        return cls(name or path.name, data, hashlib.md5(data).hexdigest())

    def verify(self) -> None:
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

    def param(self, number: int) -> str:
        return self.params.get(f"param{number}", "")

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {"params": self.params, "count": self.count}
        if self.attachments:
            doc["attachments"] = [
                {"name": a.name, "md5": a.md5, "data": base64.b64encode(a.data).decode()}
                for a in self.attachments
            ]
        for key in ("origin", "idempotency_key"):
            if getattr(self, key):
                doc[key] = getattr(self, key)
        if self.max_count != 15:
            doc["max_count"] = self.max_count
        if self.force_remote:
            doc["force_remote"] = True
        if self.tick is not None:
            doc["tick"] = self.tick
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, body: bytes) -> Envelope:
        try:
            doc = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise EnvelopeError(f"job body is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise EnvelopeError("job body is not a JSON object")
        params = doc.get("params", {})
        if not isinstance(params, dict) or any(k not in PARAMS for k in params):
            raise EnvelopeError("'params' must map param1..param4 to strings")
        try:
            attachments = [
                Attachment(str(a["name"]), base64.b64decode(a["data"]), str(a["md5"]))
                for a in doc.get("attachments", [])
            ]
            return cls(
                params={k: str(v) for k, v in params.items()},
                attachments=attachments,
                origin=str(doc.get("origin", "")),
                count=int(doc.get("count", 0)),
                max_count=int(doc.get("max_count", 15)),
                force_remote=bool(doc.get("force_remote", False)),
                idempotency_key=str(doc.get("idempotency_key", "")),
                tick=None if doc.get("tick") is None else int(doc["tick"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EnvelopeError(f"bad envelope field: {exc}") from None

    def clone(self) -> Envelope:
        """A copy for `dup`: same params and attachments, count reset as RQ does."""
        return Envelope(
            params=dict(self.params),
            attachments=list(self.attachments),
            origin=self.origin,
            max_count=self.max_count,
        )
