"""Conveyor: a distributed job queue speaking Disque's client protocol."""

from __future__ import annotations

from conveyor import compiled as _compiled

__version__ = "0.1.0"

# Before any other module of the package loads: which build of the compiled ones to take.
_compiled.install()


def __getattr__(name: str) -> object:
    # `conveyor.App` (Python tasks) without importing the worker package, and the
    # client it needs, for `conveyor server`.
    if name == "App":
        from conveyor.worker.tasks import App

        return App
    raise AttributeError(f"module 'conveyor' has no attribute {name!r}")
