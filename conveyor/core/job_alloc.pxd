# Declarations for compiling job_alloc.py with Cython (`make compile`); pure Python never
# reads this file. The C helpers are in job_slots.h (job_slots.pxd).
import cython

from conveyor.core.job_slots cimport _alloc_untracked, _copy_slot, _fill, _learn_slots

# Where each slot of _FIELDS lies in a Job (job_alloc.py).
cdef Py_ssize_t _offsets[16]

# The Job whose slots past the arguments new_job copies (job_alloc.py).
cdef object _TEMPLATE
cdef Py_ssize_t _ARGUMENTS

@cython.locals(i=cython.Py_ssize_t)
cpdef object new_job(object job_id, object queue, object body, object repl, object ctime,
                     object etime, object delay, object retry)
