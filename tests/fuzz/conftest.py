"""The command fuzzer silences the `conveyor` logger for the whole process it runs in
(fuzz/fuzz_commands.py). Under pytest that process runs every other test too, so after
each fuzz test the logger goes back to how it was before the fuzz modules were loaded:
later tests read logs with caplog."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

_LOGGER = logging.getLogger("conveyor")
# Taken when this conftest is imported: before the test modules import the fuzzers.
_BEFORE = (_LOGGER.propagate, _LOGGER.level, list(_LOGGER.handlers))


@pytest.fixture(autouse=True)
def _restore_conveyor_logging() -> Iterator[None]:
    yield
    propagate, level, handlers = _BEFORE
    _LOGGER.propagate = propagate
    _LOGGER.setLevel(level)
    _LOGGER.handlers[:] = handlers
