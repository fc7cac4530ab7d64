# Declarations for compiling confirmations.py with Cython (`make compile`); pure Python
# never reads this file. The C helpers are in core/job_slots.h (job_slots.pxd).
import cython

from conveyor.core.job_slots cimport _learn_slots, _set_slot, _slot

# Where each slot of _FIELDS lies in a Job (confirmations.py).
cdef Py_ssize_t _offsets[4]

# The loop's lists and dicts used directly; the entries read by index.
@cython.locals(index=cython.Py_ssize_t, count=cython.Py_ssize_t)
cpdef Py_ssize_t confirm_copies(object entries, Py_ssize_t start, object sender, object me,
                                dict jobs_by_id, dict pending, list replies,
                                list confirmed_here) except -1
