"""The modules that run compiled, and the switch back to pure Python.

`make compile` (run by `make run` and `make test`) builds the modules below with Cython
from their .py source: each gets a .so beside its .py (the job codec, core/records.py,
core/job_alloc.py, core/untracked.py and cluster/confirmations.py also have a .pxd, which
gives them C integers and the C API, and core/job_slots.h the C that reads and writes a
Job's slots in place; pure Python never reads either). They are the byte shufflers, where
Cython pays: the job codec (every REPLJOB, YOURJOBS, AOF record and AOF load goes through
it), the record of a job (core/records.py), the bus frame codec and the AOF reader; what
pure Python cannot do: core/untracked.py takes every job out of the cycle collector's
sight, and core/job_alloc.py makes a job without a Python-level __init__ (and a run's
jobs, its IDs and a REPLJOB's copies in one call); and the one loop a synchronous job's
confirmations take on the origin (cluster/confirmations.py). Compiling the command path
as a whole was measured and made a node slower (docs/performance.md), so it stays
interpreted.

Which file a compiled module loads from is decided here, at import:
- the .so, when it exists and is at least as new as the .py, so that an edited source is
  never shadowed by an old build;
- the .py otherwise, or everywhere when CONVEYOR_PURE_PYTHON=1 (the test suite runs both
  ways; a node's INFO shows which it got).

This module must not import the rest of the package: conveyor/__init__.py installs the
finder before any other module loads.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

PURE_ENV = "CONVEYOR_PURE_PYTHON"

COMPILED_MODULES = (
    "conveyor.core.codec",
    "conveyor.core.records",
    "conveyor.core.untracked",
    "conveyor.core.job_alloc",
    "conveyor.cluster.codec",
    "conveyor.cluster.confirmations",
    "conveyor.persistence.reader",
    "conveyor.persistence.records",
    "conveyor.node.event_log",
)

# module -> "compiled", "pure" (asked for), "not built" or "stale" (older than its .py)
status: dict[str, str] = {}


def pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def choose(source: str, built: str | None, pure: bool) -> str:
    """How a module loads: "compiled", or why not ("pure", "not built", "stale")."""
    if pure:
        return "pure"
    if built is None:
        return "not built"
    if os.stat(built).st_mtime < os.stat(source).st_mtime:
        return "stale"
    return "compiled"


def built_file(directory: str, name: str) -> str | None:
    """The extension module built for this interpreter (its own suffix), if any."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = os.path.join(directory, name + suffix)
        if os.path.exists(candidate):
            return candidate
    return None


class _CompiledOrSource(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in COMPILED_MODULES or not path:
            return None
        name = fullname.rpartition(".")[2]
        for directory in path:
            source = os.path.join(directory, name + ".py")
            if not os.path.exists(source):
                continue
            built = built_file(directory, name)
            how = status[fullname] = choose(source, built, pure_requested())
            if how == "compiled" and built is not None:
                loader = importlib.machinery.ExtensionFileLoader(fullname, built)
                return importlib.util.spec_from_file_location(fullname, built, loader=loader)
            return importlib.util.spec_from_file_location(fullname, source)
        return None


def install() -> None:
    if not any(isinstance(finder, _CompiledOrSource) for finder in sys.meta_path):
        sys.meta_path.insert(0, _CompiledOrSource())


def summary() -> str:
    """For INFO: "3/3", or also which loaded as pure Python and why:
    "2/3 (conveyor.core.codec stale)" (no "," or "=", which INFO parsers split on)."""
    for module in COMPILED_MODULES:
        __import__(module)
    compiled = sum(status.get(m) == "compiled" for m in COMPILED_MODULES)
    others = [f"{m} {status.get(m, '?')}" for m in COMPILED_MODULES if status.get(m) != "compiled"]
    text = f"{compiled}/{len(COMPILED_MODULES)}"
    return f"{text} ({'; '.join(others)})" if others else text
