"""What the fuzz targets share: the violation type, known-issue handling, keep-going mode.

A target's check raises `Violation` (or any exception escapes the code under test); that
is a crash for libFuzzer. Two modes soften it, both off by default:

- `CONVEYOR_FUZZ_KEEP_GOING=<dir>`: each distinct crash (by signature) is written once
  to `<dir>/crash-<sha1>` with its message, and fuzzing goes on (`fuzz/run.py` sets it
  for long runs, so one bug does not end a 30-minute run in its first second);
- known issues (`KNOWN_ISSUES` in each target): crashes already tracked by an xfail
  regression test in tests/fuzz/test_regressions.py, counted and not reported. An entry
  stays only while its regression test is xfail; remove both when the fix lands.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

KEEP_GOING_ENV = "CONVEYOR_FUZZ_KEEP_GOING"
# Where the commands target writes the files CONFIG SET names (see fuzz_commands.py).
SCRATCH_ENV = "CONVEYOR_FUZZ_SCRATCH"


class Violation(AssertionError):
    """The code under test broke a property the target checks."""


def signature(exc: BaseException) -> str:
    """What tells two crashes apart: the exception type, its message without numbers or
    quoted values, and the innermost frame in conveyor/ (or the harness)."""
    message = str(exc).split("\n", 1)[0]
    message = re.sub(r"'[^']*'|\"[^\"]*\"|b'[^']*'", "'…'", message)
    message = re.sub(r"[0-9]+", "N", message)[:120]
    where = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if "/conveyor/" in frame.filename or "/fuzz/" in frame.filename:
            where = f"{Path(frame.filename).name}:{frame.name}"
            break
    return f"{type(exc).__name__}: {message} @ {where}"


class Guard:
    """Wraps a target's one-input function: known issues, keep-going mode, counters."""

    def __init__(self, known: Callable[[BaseException, bytes], str | None]) -> None:
        self.known = known
        self.keep_going = os.environ.get(KEEP_GOING_ENV) or None
        self.known_hits: dict[str, int] = {}
        self.crashes: dict[str, str] = {}

    def note_known(self, label: str) -> None:
        if label not in self.known_hits:
            print(f"\n[fuzz] known issue (tracked, not a crash): {label}", flush=True)
        self.known_hits[label] = self.known_hits.get(label, 0) + 1

    def run(self, function: Callable[[bytes], None], data: bytes) -> None:
        try:
            function(data)
        except Exception as exc:
            label = self.known(exc, data)
            if label is not None:
                self.note_known(label)
                return
            if self.keep_going is None:
                raise
            self._record(exc, data)

    def _record(self, exc: BaseException, data: bytes) -> None:
        sig = signature(exc)
        if sig in self.crashes:
            return
        digest = hashlib.sha1(data).hexdigest()
        folder = Path(self.keep_going or ".")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"crash-{digest}").write_bytes(data)
        text = "".join(traceback.format_exception(exc))
        (folder / f"crash-{digest}.txt").write_text(f"{sig}\n\n{text}")
        self.crashes[sig] = digest
        print(f"\n[fuzz] CRASH (kept going) crash-{digest}: {sig}", flush=True)


def no_known_issues(exc: BaseException, data: bytes) -> str | None:
    return None


def main_args() -> list[str]:
    """libFuzzer's arguments, with `-timeout` defaulting to 5 s (a hang is a crash)."""
    args = list(sys.argv)
    if not any(arg.startswith("-timeout=") for arg in args):
        args.append("-timeout=5")
    return args
