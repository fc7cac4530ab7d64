"""Conveyor: a distributed job queue speaking Disque's client protocol."""

from __future__ import annotations

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # `conveyor.App` (Python tasks) without importing the worker package, and the
    # client it needs, for `conveyor server`.
    if name == "App":
        from conveyor.worker.tasks import App

        return App
    raise AttributeError(f"module 'conveyor' has no attribute {name!r}")
