"""A queue directory: `config.json` (and `form.json`) plus one directory per message state.

Layout (RQ's, with Conveyor job IDs as message IDs; '/' in an ID becomes '_'):

    QUEUE_DIR/config.json
    QUEUE_DIR/{que,run,done,err,relayed}/<msg id>/
        msg.json      the envelope's metadata (params, origin, count; not attachment data)
        status.json   {"state", "status" (the script's last text), "updated", "exit";
                       while it runs "pid": the script's process-group id}
        stdio.log     the script's stdout and stderr (rotated to stdio.log.1... past
                      log_max_bytes: conveyor.worker.stdiolog)
        attach/       the attachments, MD5-checked
        job/          the script's working directory (RQ_MSG_DIR)

The node holds the authoritative queue; these directories are what an operator reads on the
host that ran (or is running) a message.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from conveyor.worker.envelope import PARAMS, param_text
from conveyor.worker.stdiolog import (
    DEFAULT_BACKUPS,
    DEFAULT_MAX_BYTES,
    MAX_BACKUPS,
    MIN_MAX_BYTES,
    LogLimits,
)

STATES = ("que", "run", "done", "err", "relayed")
# Lookups of a message that keeps moving while we read it, before it counts as gone.
_LOOKUPS = 5
T = TypeVar("T")
_DEFAULT_EXEC_PREFIX = "bash -lc"
# A blocking-params lock is leased for the timeout: the lease must stay a TTL a node takes.
_MAX_TIMEOUT_S = 10 * 365 * 86400


class QueueConfigError(ValueError):
    """config.json is missing or invalid; the message says which field and why."""


@dataclass
class ScheduleEntry:
    cron: str
    params: dict[str, str] = field(default_factory=dict)


@dataclass
class QueueConfig:
    name: str
    script: str
    directory: Path
    num_workers: int = 1
    exec_prefix: str = _DEFAULT_EXEC_PREFIX
    env_vars: dict[str, str] = field(default_factory=dict)
    coalesce_params: list[int] = field(default_factory=list)
    blocking_params: list[int] = field(default_factory=list)
    schedule: list[ScheduleEntry] = field(default_factory=list)
    timeout: float = 3600.0  # seconds a script may run before it is killed
    retry: int = 30  # the job's RETRY: a message held by a dead worker comes back after it
    keep_done: float = 7 * 86400.0  # the cleaner removes done/relayed messages older than this
    env: str = "development"  # RQ_ENV
    # `dup` answers "ok <new id>" (RQ's grammar); false answers a bare "ok", for scripts
    # like the seed's bash example that compare the whole reply line with "ok".
    dup_reply_id: bool = True
    # Each message's stdio.log is rotated past this size, keeping `log_backups` old ones.
    log_limits: LogLimits = field(default_factory=LogLimits)

    @classmethod
    def load(cls, directory: Path) -> QueueConfig:
        path = directory / "config.json"
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise QueueConfigError(f"{path}: no such file (is {directory} a queue?)") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise QueueConfigError(f"{path}: {exc}") from None
        if not isinstance(doc, dict):
            raise QueueConfigError(f"{path}: must be a JSON object")
        try:
            return cls._from_doc(doc, directory)
        except (TypeError, ValueError) as exc:
            raise QueueConfigError(f"{path}: {exc}") from None

    @classmethod
    def _from_doc(cls, doc: dict[str, Any], directory: Path) -> QueueConfig:
        name, script = doc.get("name"), doc.get("script")
        if not isinstance(name, str) or not 1 <= len(name) <= 128 or "/" in name:
            raise ValueError("'name' must be a string of 1..128 characters without '/'")
        if not isinstance(script, str) or not script:
            raise ValueError("'script' must be a non-empty path")
        config = cls(
            name=_no_nul(name, "'name'"),
            script=_no_nul(script, "'script'"),
            directory=directory.resolve(),
            num_workers=_count(doc.get("num_workers", 1), "num_workers", 1, 128),
            exec_prefix=_exec_prefix(doc.get("exec_prefix", _DEFAULT_EXEC_PREFIX)),
            env_vars=_env_vars(doc.get("env_vars")),
            coalesce_params=_param_numbers(doc, "coalesce_params"),
            blocking_params=_param_numbers(doc, "blocking_params"),
            schedule=_schedule(doc.get("schedule")),
            timeout=_seconds(doc.get("timeout", 3600), "timeout", _MAX_TIMEOUT_S),
            retry=_count(doc.get("retry", 30), "retry", 1),
            keep_done=_seconds(doc.get("keep_done", 7 * 86400), "keep_done"),
            env=_env(doc.get("env")),
            dup_reply_id=_flag(doc.get("dup_reply_id", True), "dup_reply_id"),
            log_limits=LogLimits(
                _count(doc.get("log_max_bytes", DEFAULT_MAX_BYTES), "log_max_bytes", MIN_MAX_BYTES),
                _count(doc.get("log_backups", DEFAULT_BACKUPS), "log_backups", 0, MAX_BACKUPS),
            ),
        )
        if config.timeout <= 0:
            raise ValueError("'timeout' must be > 0")
        return config


def _seconds(value: Any, key: str, most: int | None = None) -> float:
    """A duration of config.json. NaN (JSON's NaN, `--timeout nan`) passed every bound
    check and failed each run (no poll wait can be made of it), an infinite timeout each
    blocking-params lock (its lease is int(timeout)); a NaN keep_done never cleaned. Only a
    JSON number: float() read "60" as 60 and true as 1 second."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"'{key}' must be a number of seconds, got {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0 or (most is not None and seconds > most):
        bound = "" if most is None else f" up to {most}"
        raise ValueError(f"'{key}' must be a finite number of seconds{bound}, got {value!r}")
    return seconds


def _count(value: Any, key: str, least: int, most: int | None = None) -> int:
    """A whole number of config.json in [least, most]; a float such as 1e7 or 2.7 (or
    1e999, which int() could not even cut), a bool and a string are refused: int() read
    2.7 as 2, true as 1 and "3" as 3, a count silently not what was written."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"'{key}' must be a whole number, got {value!r}")
    if value < least or (most is not None and value > most):
        bound = f"{least}..{most}" if most is not None else f">= {least}"
        raise ValueError(f"'{key}' must be {bound}, got {value}")
    return value


def _no_nul(text: str, where: str) -> str:
    """`text`, refused if it holds a NUL. No path, argument or environment variable can
    carry one: accepted, it would fail every message's run, not the config's load."""
    if "\0" in text:
        raise ValueError(f"{where} must not contain a NUL character (\\0): {text!r}")
    return text


def _flag(value: Any, key: str) -> bool:
    # bool("false") is True: a quoted or numeric flag would silently mean the opposite.
    if not isinstance(value, bool):
        raise ValueError(f"'{key}' must be true or false, got {value!r}")
    return value


def _exec_prefix(value: Any) -> str:
    # str(None) is "None": `"exec_prefix": null` made every run exec a program "None".
    if not isinstance(value, str):
        raise ValueError(f"'exec_prefix' must be a string (\"\" for none), got {value!r}")
    prefix = _no_nul(value, "'exec_prefix'")
    try:
        shlex.split(prefix)  # as each run splits it (script.build_command)
    except ValueError as exc:
        raise ValueError(f"'exec_prefix' is not shell words ({exc}): {prefix!r}") from None
    return prefix


def _env(value: Any) -> str:
    # null is the default; str() made it RQ_ENV=None, and 1 or true a text never written.
    if value is None:
        return os.environ.get("CONVEYOR_ENV", "development")
    if not isinstance(value, str):
        raise ValueError(f"'env' must be a string, got {value!r}")
    return _no_nul(value, "'env'")


def _env_vars(value: Any) -> dict[str, str]:
    # null is none; false, [] or "" are no object either (`or {}` read them as none).
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"'env_vars' must be an object, got {value!r}")
    env: dict[str, str] = {}
    for name, item in value.items():
        # str() made null "None" and 1 "1": a value is text as written, like `env`.
        if not isinstance(name, str) or not isinstance(item, str):
            raise ValueError(f"'env_vars' values must be strings, got {name!r}: {item!r}")
        if "=" in _no_nul(name, "'env_vars' names"):  # the exec would refuse the environment
            raise ValueError(f"'env_vars' names must not contain '=': {name!r}")
        env[name] = _no_nul(item, f"'env_vars' value of {name!r}")
    return env


def _param_numbers(doc: dict[str, Any], key: str) -> list[int]:
    value = [] if doc.get(key) is None else doc[key]
    # int() read 1.9 as 1, true as 1 and "2" as 2: a lock on a param never written.
    if not isinstance(value, list) or any(
        isinstance(n, bool) or n not in (1, 2, 3, 4) or not isinstance(n, int) for n in value
    ):
        raise ValueError(f"'{key}' must be a list of param numbers 1..4, got {value!r}")
    return sorted(set(value))


def _schedule(value: Any) -> list[ScheduleEntry]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError('\'schedule\' must be a list of {"cron": ..., "paramN": ...}')
    from conveyor.worker.cron import validate_cron  # croniter is an optional dependency

    entries = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("cron"), str):
            raise ValueError("each schedule entry needs a 'cron' string")
        validate_cron(_no_nul(item["cron"], "'schedule' cron"))
        # A param becomes an RQ_PARAMn variable of each tick's run; any other name made an
        # envelope every worker refuses, and each tick's message went to err.
        names = [_no_nul(k, "'schedule' param names") for k in item if k.startswith("param")]
        odd = sorted(name for name in names if name not in PARAMS)
        if odd:
            raise ValueError(f"'schedule' params are param1..param4, got {odd[0]!r}")
        params = {
            _no_nul(k, "'schedule' param names"): _no_nul(
                param_text(v, f"'schedule' {k}"), f"'schedule' {k}"
            )
            for k, v in item.items()
            if k.startswith("param")
        }
        entries.append(ScheduleEntry(item["cron"], params))
    return entries


def create_queue(parent: Path, name: str, script: str, **options: Any) -> Path:
    """`conveyor queue create`: a new queue directory with its config.json."""
    directory = parent / name
    if (directory / "config.json").exists():
        raise QueueConfigError(f"{directory} already has a config.json")
    doc = {"name": name, "script": script, **{k: v for k, v in options.items() if v}}
    QueueConfig._from_doc(doc, directory)  # validate before writing anything
    for state in STATES:
        (directory / state).mkdir(parents=True, exist_ok=True)
    write_json(directory / "config.json", doc)
    return directory


def write_json(path: Path, doc: dict[str, Any]) -> None:
    write_whole(path, json.dumps(doc))


def write_whole(path: Path, text: str) -> None:
    """`text` as `path`, never seen half-written: written under a temporary name, then
    renamed into place. The temporary name is this writer's own (process and thread):
    worker and console both write status.json (and worker control files), and with a
    shared name one could rename the other's half-written file into place. Hidden and not
    *.json, a crashed writer's leftover is never read as a message file; it goes with its
    message's directory (the cleaner, a delete)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def dir_name(job_id: str) -> str:
    return job_id.replace("/", "_")


class MessageStore:
    """The per-message directories of one queue on this host."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for state in STATES:
            (root / state).mkdir(parents=True, exist_ok=True)

    def find(self, job_id: str) -> tuple[str, Path] | None:
        name = dir_name(job_id)
        for state in STATES:
            path = self.root / state / name
            if path.is_dir():
                return state, path
        return None

    def enter_run(self, job_id: str, meta: dict[str, Any], resent: bool = False) -> Path:
        """The message's directory in run/: new, moved back from que/ after a resend, or a
        dead worker's left in run/ (then reused, its log kept). Few file operations: this
        runs once per message."""
        name = dir_name(job_id)
        target = self.root / "run" / name
        if resent:
            try:
                os.replace(self.root / "que" / name, target)
            except FileNotFoundError:
                pass
            except OSError:  # run/ has it too (its worker died): keep the one in run/
                shutil.rmtree(self.root / "que" / name, ignore_errors=True)
        try:
            os.mkdir(target)
        except FileExistsError:
            os.makedirs(target / "job", exist_ok=True)
            write_json(target / "msg.json", meta)
            return target
        os.mkdir(target / "job")
        # A new directory: no reader can see msg.json half-written before status.json exists.
        (target / "msg.json").write_text(json.dumps(meta))
        return target

    def stale_pid(self, path: Path) -> int | None:
        """The process group of a run a dead worker left behind in `path`, if any."""
        try:
            pid = json.loads((path / "status.json").read_text()).get("pid")
        except (OSError, ValueError):
            return None
        return pid if isinstance(pid, int) and pid > 1 else None

    def set_status(self, path: Path, state: str, text: str, **extra: Any) -> None:
        write_json(
            path / "status.json", {"state": state, "status": text, "updated": time.time(), **extra}
        )

    def move(self, path: Path, state: str, text: str, **extra: Any) -> Path:
        # The status is written before the directory moves: a reader that finds the
        # message in its new state's folder must never read the old state's status.
        target = self.root / state / path.name
        self.set_status(path, state, text, **extra)
        if target == path:  # already there: removing the "older copy" would remove it
            return target
        if target.exists():
            shutil.rmtree(target)  # an older copy (a message run twice): the new one wins
        os.replace(path, target)
        return target

    def status_text(self, job_id: str) -> tuple[str, str] | None:
        """(state, the text of status.json) of a message, None if there is none."""
        return self._where_now(
            job_id, lambda state, path: (state, (path / "status.json").read_text())
        )

    def write_in_message(self, job_id: str, name: str, doc: dict[str, Any]) -> None:
        """`doc` as file `name` of the message's directory where it is now (an operator may
        move it meanwhile); nothing once the message is gone."""
        self._where_now(job_id, lambda _state, path: write_json(path / name, doc))

    def _where_now(self, job_id: str, use: Callable[[str, Path], T]) -> T | None:
        """`use(state, directory)` on the message where it is; None if there is none. A
        worker or an operator may move it to another state between the lookup and the use
        (FileNotFoundError): it is looked for again rather than reported missing."""
        for _attempt in range(_LOOKUPS):
            found = self.find(job_id)
            if found is None:
                return None
            try:
                return use(*found)
            except FileNotFoundError:
                continue
        return None

    def status(self, job_id: str) -> dict[str, Any] | None:
        found = self.find(job_id)
        if found is None:
            return None
        try:
            return json.loads((found[1] / "status.json").read_text())
        except (OSError, json.JSONDecodeError):
            return {"state": found[0], "status": ""}

    def clean(self, keep_s: float, now: float | None = None) -> int:
        """The cleaner: remove done/relayed messages whose last update is older than keep_s."""
        cutoff = (time.time() if now is None else now) - keep_s
        removed = 0
        for state in ("done", "relayed"):
            for path in (self.root / state).iterdir():
                try:
                    if (path / "status.json").stat().st_mtime < cutoff:
                        shutil.rmtree(path)
                        removed += 1
                except OSError:
                    continue
        return removed
