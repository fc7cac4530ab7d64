"""Referenced attachments: fetched by the worker that runs the message, into the message's
`attach/` directory, streamed and MD5-checked.

The console stores uploaded files on its disk and puts only a reference in the job (URL,
size, MD5), so the node never holds a file's bytes. Whichever worker takes the message, on
whichever host, fetches the file over HTTP in chunks (never the whole file in memory) into a
`.part` file, checks its size and MD5, then renames it to its name: a script never sees a
half-written or corrupted attachment.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import os
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from conveyor.worker.envelope import Attachment, EnvelopeError

CHUNK = 1024 * 1024
TIMEOUT_S = 30.0  # per socket operation, not for the whole file
# A file is fetched into "<name>.part": 5 bytes more must fit the usual 255-byte limit.
MAX_NAME_BYTES = 250


class FetchError(Exception):
    """A fetch that may work later (the console is restarting, a network error): the
    message is run again after a delay rather than failed."""


def check_name(name: str) -> None:
    if not name or "/" in name or name.startswith(".") or "\0" in name:
        raise EnvelopeError(f"attachment name not allowed: {name!r}")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: no file can have that name
        raise EnvelopeError(f"attachment name not allowed: {name!r}") from None
    if size > MAX_NAME_BYTES:
        raise EnvelopeError(
            f"attachment name over {MAX_NAME_BYTES} bytes in UTF-8 ({size}): {name[:40]!r}…"
        )


def _too_long(exc: OSError, name: str) -> None:
    """A name this file system cannot hold (some allow fewer than 255 bytes): the message
    can never run here, so it is bad, not a fetch to try again."""
    if exc.errno == errno.ENAMETOOLONG:
        raise EnvelopeError(f"attachment name too long for this file system: {name[:40]!r}…")


def write_all(attachments: list[Attachment], directory: Path) -> None:
    """Every attachment of a message into `directory`: inline ones written, referenced ones
    fetched. EnvelopeError: the message is bad (ends in err); FetchError: try again later."""
    if not attachments:
        return
    directory.mkdir(exist_ok=True)
    for attachment in attachments:
        check_name(attachment.name)
        target = directory / attachment.name
        if attachment.referenced:
            if _already_fetched(target, attachment):
                continue  # a re-delivery of a message whose files arrived before
            fetch(attachment, target)
        else:
            attachment.verify()
            try:
                target.write_bytes(attachment.data)
            except OSError as exc:
                _too_long(exc, attachment.name)
                raise


def _already_fetched(target: Path, attachment: Attachment) -> bool:
    try:
        return attachment.size is not None and target.stat().st_size == attachment.size
    except OSError:
        return False


def check_url(attachment: Attachment) -> None:
    """A URL no fetch could ever use is a bad message (err at once): urlsplit's ValueError
    (an unclosed "[") escaped the slot, and the message came back after RETRY for ever; no
    host or a port that is no number was fetched again and again until max_count."""
    url, name = attachment.url, attachment.name
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is no number 0..65535 raises ValueError here
    except ValueError as exc:
        raise EnvelopeError(f"attachment {name!r}: bad URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise EnvelopeError(f"attachment {name!r}: URL must be http(s), not {parts.scheme!r}")
    if not parts.hostname or any(ord(c) < 33 for c in url):
        raise EnvelopeError(f"attachment {name!r}: bad URL: no host, or a space or control")


def fetch(attachment: Attachment, target: Path) -> None:
    """Stream `attachment.url` into `target`, checking size and MD5 on the way."""
    check_url(attachment)
    part = target.with_name(target.name + ".part")
    digest = hashlib.md5()
    size = 0
    request = urllib.request.Request(attachment.url, headers={"User-Agent": "conveyor-worker"})
    try:
        with (
            urllib.request.urlopen(request, timeout=TIMEOUT_S) as response,
            open(part, "wb") as out,
        ):
            while chunk := response.read(CHUNK):
                size += len(chunk)
                if attachment.size is not None and size > attachment.size:
                    raise EnvelopeError(
                        f"attachment {attachment.name!r}: more than its {attachment.size} bytes"
                    )
                digest.update(chunk)
                out.write(chunk)
    except urllib.error.HTTPError as exc:
        _discard(part)
        if exc.code in (404, 410):  # the console no longer has it: retrying cannot help
            raise EnvelopeError(f"attachment {attachment.name!r}: {exc.code} at its URL") from None
        raise FetchError(f"attachment {attachment.name!r}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        _discard(part)
        if isinstance(exc, OSError):
            _too_long(exc, attachment.name)
        raise FetchError(f"attachment {attachment.name!r}: {exc}") from None
    except BaseException:
        _discard(part)
        raise
    _check(attachment, part, size, digest.hexdigest())
    os.replace(part, target)


def _check(attachment: Attachment, part: Path, size: int, md5: str) -> None:
    if attachment.size is not None and size < attachment.size:
        _discard(part)  # a connection cut short: the next delivery fetches it again
        raise FetchError(f"attachment {attachment.name!r}: {size} of {attachment.size} bytes")
    if md5 != attachment.md5:
        _discard(part)
        raise EnvelopeError(
            f"attachment {attachment.name!r} failed its MD5 check ({md5} != {attachment.md5})"
        )


def _discard(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
