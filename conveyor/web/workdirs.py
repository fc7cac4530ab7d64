"""Worker queue directories as the console sees them, read through `conveyor.worker.queuedir`.

Each `--queues-dir` is a queue directory (it has a config.json) or a parent of several. They
are found again at most every few seconds, so a queue created while the console runs shows
up. Listing a state reads at most `SCAN_LIMIT` entries: a state with more is paged over
those, newest first, and says so (`truncated`).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from conveyor.web import livelog
from conveyor.web.ids import printable
from conveyor.worker.queuedir import STATES, MessageStore, QueueConfig, QueueConfigError, dir_name

SCAN_LIMIT = 10_000
LOG_TAIL_BYTES = 256 * 1024
_RESCAN_S = 3.0
FINISHED = ("done", "err", "relayed")


class QueueDirs:
    """name -> QueueConfig for the queue directories under the configured paths."""

    def __init__(self, paths: list[Path]) -> None:
        self._paths = [p.expanduser() for p in paths]
        self._configs: dict[str, QueueConfig] = {}
        self._errors: dict[str, str] = {}
        self._scanned = 0.0
        self._lock = threading.Lock()

    def _rescan(self) -> None:
        configs: dict[str, QueueConfig] = {}
        errors: dict[str, str] = {}
        for path in self._paths:
            candidates = [path] if (path / "config.json").exists() else _children(path)
            for directory in candidates:
                try:
                    config = QueueConfig.load(directory)
                except QueueConfigError as exc:
                    errors[str(directory)] = str(exc)
                    continue
                configs.setdefault(config.name, config)  # the first path given wins
        self._configs, self._errors = configs, errors

    def _fresh(self) -> dict[str, QueueConfig]:
        with self._lock:
            if time.monotonic() - self._scanned >= _RESCAN_S:
                self._rescan()
                self._scanned = time.monotonic()
            return self._configs

    def names(self) -> list[str]:
        return sorted(self._fresh())

    def get(self, name: str) -> QueueConfig | None:
        return self._fresh().get(name)

    def errors(self) -> dict[str, str]:
        self._fresh()
        return dict(self._errors)


def _children(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if (p / "config.json").is_file())
    except OSError:
        return []


def counts(config: QueueConfig) -> dict[str, int]:
    result = {}
    for state in STATES:
        try:
            result[state] = sum(1 for _ in (config.directory / state).iterdir())
        except OSError:
            result[state] = 0
    return result


def form_fields(config: QueueConfig) -> list[dict[str, str]]:
    """RQ's form.json as the enqueue form's fields: param1..param4 with label and help.
    `"default": "hidden"` hides the params form.json does not mention."""
    try:
        doc = json.loads((config.directory / "form.json").read_text())
    except (OSError, ValueError):
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    hidden_by_default = doc.get("default") == "hidden"
    fields = []
    for number in range(1, 5):
        spec = doc.get(f"mesg_param{number}")
        if spec is None and hidden_by_default:
            continue
        spec = spec if isinstance(spec, dict) else {}
        fields.append(
            {
                "name": f"param{number}",
                "label": str(spec.get("label", f"param{number}")),
                "help": str(spec.get("help", "")),
            }
        )
    return fields


def _read_raw_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _read_json(path: Path) -> dict[str, Any]:
    """A message's JSON file for showing: JSON may hold a lone surrogate (a param
    "\\ud800" in a job body added by hand), which no response could encode."""
    doc: dict[str, Any] = _printable(_read_raw_json(path))
    return doc


def _printable(value: Any) -> Any:
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(k)): _printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_printable(item) for item in value]
    return value


def _summary(state: str, path: Path) -> dict[str, Any]:
    meta = _read_json(path / "msg.json")
    status = _read_json(path / "status.json")
    envelope = meta.get("envelope") if isinstance(meta.get("envelope"), dict) else {}
    params = envelope.get("params") if isinstance(envelope.get("params"), dict) else {}
    try:
        log_size = (path / "stdio.log").stat().st_size
    except OSError:
        log_size = 0
    updated = status.get("updated")
    return {
        "id": str(meta.get("id") or path.name),
        "dir": path.name,
        "state": state,
        "status": str(status.get("status", "")),
        "updated": float(updated) if isinstance(updated, int | float) else None,
        "exit": status.get("exit") if isinstance(status.get("exit"), int) else None,
        "params": {str(k): str(v) for k, v in params.items()},
        "count": int(envelope.get("count", 0)) if str(envelope.get("count", 0)).isdigit() else 0,
        "log_size": log_size,
    }


def _entries(config: QueueConfig, state: str) -> tuple[list[Path], bool]:
    """Up to SCAN_LIMIT message directories of a state, newest first."""
    folder = config.directory / state
    found: list[tuple[float, Path]] = []
    truncated = False
    try:
        for index, path in enumerate(folder.iterdir()):
            if index >= SCAN_LIMIT:
                truncated = True
                break
            try:
                found.append((path.stat().st_mtime, path))
            except OSError:
                continue
    except OSError:
        return [], False
    found.sort(key=lambda item: item[0], reverse=True)
    return [path for _, path in found], truncated


def list_messages(
    config: QueueConfig, state: str, offset: int, limit: int, search: str = ""
) -> dict[str, Any]:
    """A page of one state's messages; `search` matches ID, status text and params."""
    paths, truncated = _entries(config, state)
    needle = search.strip().lower()
    items: list[dict[str, Any]] = []
    total = 0
    for path in paths:
        if needle:
            summary = _summary(state, path)
            text = " ".join([summary["id"], summary["status"], *summary["params"].values()])
            if needle not in text.lower():
                continue
        elif not offset <= total < offset + limit:
            total += 1  # outside the page: count it without reading its files
            continue
        else:
            summary = _summary(state, path)
        if offset <= total < offset + limit:
            items.append(summary)
        total += 1
    return {
        "state": state,
        "total": total,
        "offset": offset,
        "limit": limit,
        "truncated": truncated,
        "items": items,
    }


def find(config: QueueConfig, msg_id: str) -> tuple[str, Path] | None:
    """The message's state and directory; None for an unknown or impossible ID (never a
    path outside the queue directory: '/' becomes '_' as the worker does)."""
    name = dir_name(msg_id)
    try:
        too_long = len(name.encode("utf-8")) > 255
    except UnicodeEncodeError:
        return None
    if not name or name in (".", "..") or "\0" in name or too_long:
        return None
    for state in STATES:
        path = config.directory / state / name
        try:
            if path.is_dir():
                return state, path
        except OSError:
            return None
    return None


def message(config: QueueConfig, msg_id: str) -> dict[str, Any] | None:
    """One message: its summary, the envelope without attachment data, status.json."""
    found = find(config, msg_id)
    if found is None:
        return None
    state, path = found
    doc = _summary(state, path)
    envelope = _read_json(path / "msg.json").get("envelope")
    envelope = dict(envelope) if isinstance(envelope, dict) else {}
    attachments = envelope.pop("attachments", [])
    doc["attachments"] = [
        {
            "name": str(a.get("name", "")),
            "md5": str(a.get("md5", "")),
            "size": a.get("size") if isinstance(a.get("size"), int) else None,
            "url": str(a["url"]) if isinstance(a.get("url"), str) else None,
        }
        for a in (attachments if isinstance(attachments, list) else [])
        if isinstance(a, dict)
    ]
    doc["envelope"] = {k: v for k, v in envelope.items() if isinstance(v, str | int | dict)}
    doc["status_json"] = _read_json(path / "status.json")
    doc["webhook"] = _read_json(path / "webhook.json") or None
    return doc


def read_log(config: QueueConfig, msg_id: str, offset: int, limit: int) -> tuple[bytes, int]:
    """`limit` bytes of stdio.log from `offset` (negative: from the end) and the size."""
    found = find(config, msg_id)
    if found is None:
        return b"", -1
    data, size, _ = livelog.read(found[1], offset, limit)
    return data, size


def envelope_json(config: QueueConfig, msg_id: str) -> bytes | None:
    """The message's whole envelope (attachments included) for a re-run."""
    found = find(config, msg_id)
    if found is None:
        return None
    envelope = _read_raw_json(found[1] / "msg.json").get("envelope")
    return json.dumps(envelope).encode() if isinstance(envelope, dict) else None


def note_rerun(config: QueueConfig, msg_id: str, new_id: str) -> None:
    found = find(config, msg_id)
    if found is not None:
        status = _read_json(found[1] / "status.json")
        text = f"{status.get('status', '')} (re-run as {new_id})".strip()
        MessageStore(config.directory).set_status(found[1], found[0], text)


def move(config: QueueConfig, msg_id: str, to: str, text: str) -> str:
    """Move a finished message to another finished state (out of err, mostly)."""
    found = find(config, msg_id)
    if found is None:
        raise LookupError(msg_id)
    if found[0] not in FINISHED or to not in FINISHED:
        raise ValueError(f"only finished messages move, between {', '.join(FINISHED)}")
    if found[0] != to:  # a move to where it is already (a second click) changes nothing
        MessageStore(config.directory).move(found[1], to, text)
    return to


def delete(config: QueueConfig, msg_id: str) -> None:
    """Remove a finished message's directory (never one whose script may be running)."""
    found = find(config, msg_id)
    if found is None:
        raise LookupError(msg_id)
    if found[0] not in FINISHED:
        raise ValueError(f"a message in {found[0]} cannot be deleted; only {', '.join(FINISHED)}")
    shutil.rmtree(found[1])
