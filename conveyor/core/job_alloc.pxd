# Declarations for compiling job_alloc.py with Cython (`make compile`); pure Python never
# reads this file. The C helpers are in job_slots.h.
cdef extern from "conveyor/core/job_slots.h":
    bint _learn_slots "conveyor_learn_slots" (object job_type, object names,
                                              Py_ssize_t *offsets, Py_ssize_t capacity)
    object _alloc_untracked "conveyor_alloc_untracked" (object job_type, Py_ssize_t items)
    void _fill "conveyor_fill_slot" (object job, Py_ssize_t offset, object value)

# Where each slot of _FIELDS lies in a Job (job_alloc.py).
cdef Py_ssize_t _offsets[16]

cdef object ACTIVE
