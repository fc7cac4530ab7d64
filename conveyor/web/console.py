"""The console's shared state (config, node gateway, queue directories, sampler) and the
helpers routes share: who is asking, job bodies as JSON, full message URLs."""

from __future__ import annotations

import base64
import binascii
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Request

from conveyor.web.attachments import AttachmentStore
from conveyor.web.config import Principal, WebConfig
from conveyor.web.gateway import ApiError, Gateway
from conveyor.web.ids import printable
from conveyor.web.sampler import Sampler
from conveyor.web.streams import SampleCache, StreamSlots
from conveyor.web.workdirs import QueueDirs

MAX_NAME = 1024  # bytes in a queue name the console passes on; the node has its own limits
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
_STORE_RETRY_S = 10.0


@dataclass
class Console:
    config: WebConfig
    gateway: Gateway
    dirs: QueueDirs
    sampler: Sampler
    streams: StreamSlots = field(default_factory=lambda: StreamSlots(100))
    # One sample a second per watched page, shared by the streams watching it.
    samples: SampleCache = field(default_factory=SampleCache)
    registry: Any = None  # /metrics' prometheus registry, made on the first scrape
    _store: AttachmentStore | None = None
    _store_error: tuple[float, str] | None = None
    _store_lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def create(cls, config: WebConfig) -> Console:
        gateway = Gateway(config.nodes, config.node_password)
        dirs = QueueDirs(config.queues_dirs)
        streams = StreamSlots(config.max_streams)
        # A key per watched page; no more pages are watched than streams may be open.
        samples = SampleCache(max_entries=config.max_streams)
        return cls(config, gateway, dirs, Sampler(gateway, dirs), streams, samples)

    def close(self) -> None:
        self.gateway.close()

    def attachment_store(self) -> AttachmentStore:
        """The store under `data_dir`, or else under the node's `dir` when the first node
        runs on this host (as `make run` starts them); 409 when there is neither."""
        with self._store_lock:
            if self._store is not None:
                return self._store
            if self._store_error and time.monotonic() - self._store_error[0] < _STORE_RETRY_S:
                raise ApiError(409, "no_attachment_store", self._store_error[1])
            try:
                self._store = AttachmentStore(
                    self._data_dir() / "attachments",
                    max_total=self.config.max_attachments_total_bytes,
                )
            except (ApiError, OSError) as exc:
                text = exc.message if isinstance(exc, ApiError) else f"data dir: {exc}"
                self._store_error = (time.monotonic(), text)
                raise ApiError(409, "no_attachment_store", text) from None
            return self._store

    def _data_dir(self) -> Path:
        if self.config.data_dir is not None:
            return self.config.data_dir
        host = self.config.nodes[0].rsplit(":", 1)[0]
        if host not in _LOCAL_HOSTS:
            raise ApiError(409, "no_attachment_store", "attachments need data_dir in config")
        reply = self.gateway.call("execute_command", "CONFIG", "GET", "dir")
        # A map in RESP3, a flat [name, value] array in RESP2.
        flat = reply if isinstance(reply, list) and len(reply) % 2 == 0 else []
        pairs = reply if isinstance(reply, dict) else dict(zip(flat[::2], flat[1::2], strict=True))
        value = pairs.get(b"dir", pairs.get("dir"))
        if value is not None:
            path = Path(value.decode() if isinstance(value, bytes) else str(value))
            if path.is_dir():
                return path
        raise ApiError(409, "no_attachment_store", "the node's dir is not on this host")


def console(request: Request) -> Console:
    found: Console = request.app.state.console
    return found


def principal(request: Request) -> Principal:
    """The user the security middleware let in (it runs before every route)."""
    found = request.scope.get("state", {}).get("principal")
    return found if isinstance(found, Principal) else Principal("anonymous", "read")


def check_name(name: str, what: str = "queue") -> str:
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise ApiError(400, "bad_name", f"a {what} name must be valid UTF-8") from None
    if not name or size > MAX_NAME:
        raise ApiError(400, "bad_name", f"a {what} name must be 1..{MAX_NAME} bytes")
    if any(ord(c) < 32 for c in name):
        raise ApiError(400, "bad_name", f"a {what} name may not contain control characters")
    return name


def body_doc(body: bytes) -> dict[str, str]:
    """A job body for JSON: UTF-8 text as is, anything else base64-encoded."""
    try:
        return {"body": body.decode("utf-8"), "body_encoding": "utf-8"}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode(), "body_encoding": "base64"}


def body_bytes(text: str, encoding: str) -> bytes:
    if encoding == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "bad_body", "body is not valid base64") from None
    return text.encode("utf-8", "surrogatepass")


def base_url(request: Request, config: WebConfig) -> str:
    """This console's URL, with RQ's canonical `host` when configured."""
    root = request.scope.get("root_path", "")
    host = config.public_host()
    if host is None:
        return str(request.base_url).rstrip("/")
    netloc = f"[{host}]" if ":" in host else host
    return f"{request.url.scheme}://{netloc}:{config.port}{root}"


def message_path(queue: str, msg_id: str) -> str:
    return f"/q/{quote(queue, safe='')}/{quote(msg_id.replace('/', '_'), safe='')}"


def message_url(request: Request, config: WebConfig, queue: str, msg_id: str) -> str:
    """RQ's full message ID: the message page's absolute URL."""
    return base_url(request, config) + message_path(queue, msg_id)


def show_doc(show: dict[str, Any]) -> dict[str, Any]:
    """SHOW's fields with underscores, the body as `body_doc`."""
    doc = {k.replace("-", "_"): v for k, v in show.items() if k != "body"}
    if isinstance(doc.get("queue"), str):
        doc["queue"] = printable(doc["queue"])
    doc.update(body_doc(show.get("body") or b""))
    return doc
