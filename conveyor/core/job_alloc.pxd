# Declarations for compiling job_alloc.py with Cython (`make compile`); pure Python never
# reads this file. The C helpers are in job_slots.h (job_slots.pxd).
import cython

from conveyor.core.job_slots cimport (
    _alloc_untracked,
    _copy_slot,
    _fill,
    _learn_slots,
    _set_slot,
)

# Where each slot of _FIELDS lies in a Job (job_alloc.py).
cdef Py_ssize_t _offsets[16]

# The Job whose slots past the arguments new_job copies (job_alloc.py).
cdef object _TEMPLATE
cdef Py_ssize_t _ARGUMENTS, _STATE, _FLAGS, _NACKS, _DELIVERIES, _QTIME, _DELIVERED_TO, _CONFIRMED_BY

@cython.locals(i=cython.Py_ssize_t)
cpdef object new_job(object job_id, object queue, object body, object repl, object ctime,
                     object etime, object delay, object retry)

# new_ids' writer (compiled only): each ID a bytes object made at its size, filled by copies.
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memcpy

@cython.locals(plen=cython.Py_ssize_t, slen=cython.Py_ssize_t, size=cython.Py_ssize_t,
               source=cython.p_char, out=cython.p_char, one=bytes, ids=list)
cdef list _ids_in_place(bytes prefix, bytes chars, Py_ssize_t start, Py_ssize_t count,
                        Py_ssize_t width, bytes suffix)

# new_jobs: the run's lists read by index, the two slots a run sets stored in place.
@cython.locals(index=cython.Py_ssize_t, count=cython.Py_ssize_t, jobs=list)
cpdef list new_jobs(list ids, object queue, list bodies, object repl, object ctime,
                    object etime, object delay, object retry, object state, object flags,
                    object jobs_by_id)

# new_copies: the records read by index, the copies' slots stored in place, the lists it
# fills appended to directly.
# Its times are C integers: a bus record's TTL, DELAY and RETRY are 32-bit fields.
@cython.locals(index=cython.Py_ssize_t, count=cython.Py_ssize_t, size=cython.Py_ssize_t,
               taken=list, filed=list, whens=list, etime=cython.longlong,
               etime_ms=cython.longlong, qtime=cython.longlong, jitter=cython.double,
               drawn=cython.longlong, flags=cython.long)
cpdef tuple new_copies(object records, Py_ssize_t start, object nodes, object queue_name,
                       object name, object holders, long long now_ms, long long advance_ms,
                       long long jitter_ms, Py_ssize_t overhead, long delivered_flag,
                       dict jobs_by_id, object random, tuple made, object last_ctime)
