# cython: binding=False
"""Objects the cycle collector need not see: jobs.

A Job's slots hold bytes, ints, None and tuples of node names, so a job can never be part
of a reference cycle: reference counting alone frees it. Yet CPython tracks every object
with `__slots__`, and each young collection walks the jobs made since the last one, three
generations over, before node/gc_policy.py freezes them. `untrack` takes an object out of
the collector's lists (PyObject_GC_UnTrack, as CPython itself does for tuples and dicts
of atomic values), so collections walk only what can form cycles.

Compiled (`make compile`, with untracked.pxd) it calls the C API; pure Python has no way to
untrack, and there `untrack` does nothing: the collector walks jobs, as before, and frees
the same objects. Untracking never changes what is freed or when, only what a collection
reads. `binding=False` makes `untrack` a builtin function, which the interpreter calls
without a Python frame.
"""

from __future__ import annotations

try:
    import cython

    COMPILED: bool = cython.compiled
except ImportError:  # pure Python without Cython installed
    COMPILED = False


def untrack(obj: object) -> None:
    """Take `obj` out of the cycle collector's sight; only for objects that can hold no
    reference cycle (a job). A no-op in pure Python and for an untracked object."""
    # The C API names come from untracked.pxd, which only the compiled module reads.
    if COMPILED and PyObject_GC_IsTracked(obj):  # noqa: F821
        PyObject_GC_UnTrack(obj)  # noqa: F821
