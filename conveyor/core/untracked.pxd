# Declarations for compiling untracked.py with Cython (`make compile`); pure Python never
# reads this file. Both functions are in CPython's stable C API (3.9+).
cdef extern from "Python.h":
    bint PyObject_GC_IsTracked(object op)
    void PyObject_GC_UnTrack(object op)
