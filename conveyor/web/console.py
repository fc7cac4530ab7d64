"""The console's shared state (config, node gateway, queue directories, sampler) and the
helpers routes share: who is asking, job bodies as JSON, full message URLs."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from fastapi import Request

from conveyor.web.config import Principal, WebConfig
from conveyor.web.gateway import ApiError, Gateway
from conveyor.web.sampler import Sampler
from conveyor.web.workdirs import QueueDirs

MAX_NAME = 1024  # bytes in a queue name the console passes on; the node has its own limits


@dataclass
class Console:
    config: WebConfig
    gateway: Gateway
    dirs: QueueDirs
    sampler: Sampler
    registry: Any = None  # /metrics' prometheus registry, made on the first scrape

    @classmethod
    def create(cls, config: WebConfig) -> Console:
        gateway = Gateway(config.nodes, config.node_password)
        dirs = QueueDirs(config.queues_dirs)
        return cls(config, gateway, dirs, Sampler(gateway, dirs))

    def close(self) -> None:
        self.gateway.close()


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
    doc.update(body_doc(show.get("body") or b""))
    return doc
