"""Authentication, roles, CSRF and security headers, as one ASGI middleware in front of the
whole app: a request it refuses never reaches a route, so it never changes any state.

- Who: HTTP basic auth against config `basic_auth.users`, or `Authorization: Bearer` with
  one of `api_tokens`. With neither configured everyone is `anonymous` (admin, or read
  with `read_only`): the console binds 127.0.0.1 by default.
- Roles: `read` may only use GET/HEAD/OPTIONS; any other method is refused with 403.
- CSRF: a write from a browser (it sends `Origin` or `Sec-Fetch-Site`, which no page of
  another site can suppress) must come from this origin and carry the user's CSRF token, in
  the `X-CSRF-Token` header (the pages' scripts) or the `csrf_token` form field (forms).
  Bearer-token requests are exempt (a browser never adds that header on its own), and so
  are non-browser clients (curl, RQ clients), which hold no ambient credentials to abuse.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request

from conveyor.web.config import Principal, WebConfig

log = logging.getLogger("conveyor.web")
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_FORM_BYTES = 64 * 1024 * 1024  # a browser form with attachments, read to find its token
# Any other request body is read whole into memory (JSON, forms) before a route checks it:
# without a cap, one POST of some GB would take the console's memory. The JSON API's largest
# field is 12 MB (schemas.MAX_BODY_CHARS); files of any size go to the two routes below,
# which stream them to disk.
MAX_BODY_BYTES = 64 * 1024 * 1024
_STREAMED_BODY = re.compile(r"/api/v1/attachments|/q/[^/]+/new_message")
_MAX_BODY_MESSAGES = 1_000_000
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
# CSS and JS hold no data: the login prompt page needs them. An attachment's URL holds 192
# random bits: it is its own credential, so workers fetch without the console's passwords.
_PUBLIC_PREFIXES = ("/static/", "/attachments/")

SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; "
        b"style-src 'self'; script-src 'self'; connect-src 'self'; object-src 'none'; "
        b"frame-ancestors 'none'; base-uri 'self'; form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
]


def csrf_token(config: WebConfig, principal: Principal) -> str:
    """The user's CSRF token: stable for the process, unguessable without the secret."""
    digest = hmac.new(config.secret_key.encode(), f"csrf:{principal.name}".encode(), "sha256")
    return digest.hexdigest()[:40]


def _password_ok(given: str, expected: str) -> bool:
    # Compare digests so the time taken does not depend on where the strings differ.
    return hmac.compare_digest(
        hashlib.sha256(given.encode("utf-8", "surrogateescape")).digest(),
        hashlib.sha256(expected.encode("utf-8", "surrogateescape")).digest(),
    )


def authenticate(config: WebConfig, authorization: str | None) -> Principal | None:
    if not config.auth_enabled:
        return Principal("anonymous", "read" if config.read_only else "admin")
    if not authorization:
        return None
    scheme, _, credentials = authorization.partition(" ")
    credentials = credentials.strip()
    if scheme.lower() == "bearer" and config.tokens:
        found = None
        for token, principal in config.tokens.items():
            if _password_ok(credentials, token):
                found = principal
        return found
    if scheme.lower() == "basic" and config.users:
        try:
            decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):  # ValueError: a non-ASCII character
            return None
        name, sep, password = decoded.partition(":")
        expected, role = config.users.get(name, ("\0no such user\0", "read"))
        if sep and _password_ok(password, expected) and name in config.users:
            return Principal(name, role)
    return None


def _same_origin(headers: Headers) -> bool:
    origin = headers.get("origin")
    if origin is not None:
        if origin == "null":
            return False
        try:
            netloc = urlsplit(origin).netloc
        except ValueError:  # "http://[": an origin no browser sends, so not ours
            return False
        return netloc.lower() == headers.get("host", "").lower()
    return headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")


def _is_browser(headers: Headers) -> bool:
    return "origin" in headers or "sec-fetch-site" in headers


class SecurityMiddleware:
    def __init__(self, app: ASGIApp, config: WebConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response = _Progress(_with_security_headers(send))
        try:
            await self._guard(scope, receive, response.send)
        except Exception:
            # After a complete response the app's error handler answered and logged it
            # already (Starlette's ServerErrorMiddleware answers, then raises on): not
            # logged twice. Halfway through one, nothing can be answered any more: raised
            # on, so the server drops the connection and the client sees it cut short.
            if response.started and not response.complete:
                raise
            if not response.complete:
                await self._failed(scope, response.send)

    async def _failed(self, scope: Scope, send: Send) -> None:
        """An exception before any response (this middleware's own, out of the app's
        error handlers): one log record with its traceback, and the app's JSON 500."""
        log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
        await self._refuse(send, 500, "internal", "internal error; see the console's log")

    async def _guard(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        path = scope.get("path", "")
        root = self.config.relative_root
        local_path = path[len(root) :] if root and path.startswith(root) else path
        principal = authenticate(self.config, headers.get("authorization"))
        if principal is None and not local_path.startswith(_PUBLIC_PREFIXES):
            await self._refuse(send, 401, "unauthorized", "authentication required")
            return
        scope.setdefault("state", {})["principal"] = principal
        if scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        if principal is None or not principal.can_write:
            await self._refuse(send, 403, "read_only", "this user may only read")
            return
        bearer = headers.get("authorization", "").lower().startswith("bearer ")
        if _is_browser(headers) and not bearer:
            if not _same_origin(headers):
                await self._refuse(send, 403, "cross_origin", "cross-origin write refused")
                return
            receive, token = await self._find_token(scope, receive, headers)
            if token is None:  # the body was too large to look for a token in
                await self._refuse(send, 413, "too_large", "form body too large")
                return
            expected = csrf_token(self.config, principal).encode()
            if not hmac.compare_digest(token.encode("utf-8", "surrogateescape"), expected):
                await self._refuse(send, 403, "csrf", "missing or wrong CSRF token")
                return
        if not _STREAMED_BODY.fullmatch(local_path):
            bounded = await _bounded_body(receive, headers)
            if bounded is None:
                message = f"a request body is at most {MAX_BODY_BYTES} bytes"
                await self._refuse(send, 413, "too_large", message)
                return
            receive = bounded
        await self.app(scope, receive, send)

    async def _find_token(
        self, scope: Scope, receive: Receive, headers: Headers
    ) -> tuple[Receive, str | None]:
        """The CSRF token from the header, or from the form body (then the body is read
        whole and replayed to the route)."""
        token = headers.get("x-csrf-token")
        if token is not None:
            return receive, token
        if not headers.get("content-type", "").lower().startswith(_FORM_TYPES):
            return receive, ""
        chunks = await _read_body(receive, MAX_FORM_BYTES)
        if chunks is None:
            return receive, None
        try:
            form = await Request(scope, _replay(chunks)).form()
        except Exception:  # a malformed form has no token: refused below as CSRF
            return _replay(chunks, receive), ""
        try:
            value = form.get("csrf_token")
            token = value if isinstance(value, str) else ""
        finally:
            await form.close()
        return _replay(chunks, receive), token

    async def _refuse(self, send: Send, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": {"code": code, "message": message}}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        if status == 401:
            realm = self.config.realm.encode()
            headers.append((b"www-authenticate", b'Basic realm="' + realm + b'", charset="UTF-8"'))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Receive, limit: int) -> list[bytes] | None:
    chunks: list[bytes] = []
    size = 0
    for _ in range(_MAX_BODY_MESSAGES):  # bounded in bytes (limit) and in messages
        message = await receive()
        if message["type"] == "http.disconnect":
            return chunks
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks
    return None


async def _bounded_body(receive: Receive, headers: Headers) -> Receive | None:
    """The body read whole and replayed, or None when it is over MAX_BODY_BYTES (then
    refused before reading it, if its Content-Length says so)."""
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    chunks = await _read_body(receive, MAX_BODY_BYTES)
    return None if chunks is None else _replay(chunks, receive)


def _replay(chunks: list[bytes], then: Receive | None = None) -> Receive:
    """The chunks read, then what the connection says next (its disconnect)."""
    pending = list(chunks) or [b""]

    async def receive() -> Message:
        if pending:
            body = pending.pop(0)
            return {"type": "http.request", "body": body, "more_body": bool(pending)}
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive


class _Progress:
    """How far the response went: its start sent, its last body piece sent."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.complete = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete = True
        await self._send(message)


def _with_security_headers(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            present = {name.lower() for name, _ in headers}
            headers += [(n, v) for n, v in SECURITY_HEADERS if n not in present]
            if b"cache-control" not in present:
                headers.append((b"cache-control", b"no-store"))
            message["headers"] = headers
        await send(message)

    return wrapped
