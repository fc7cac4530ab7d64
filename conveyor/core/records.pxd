# Declarations for compiling records.py with Cython (`make compile`); pure Python never
# reads this file. The C helpers are in job_slots.h (job_slots.pxd).
import cython

from conveyor.core.job_slots cimport _learn_slots, _record_in_place, _slot

# Where each slot of _SLOTS lies in a Job (records.py).
cdef Py_ssize_t _offsets[13]

# The flags, as C constants (assigned from their imports at module start).
cdef long DISQUE_BCAST_QUEUED, DISQUE_BCAST_WILLQUEUE, DISQUE_DELIVERED, DELIVERED, QUEUED_ONCE

@cython.locals(disque=cython.long)
cdef long _disque_flags(long flags, object retry, bint for_bus) except? -1
cdef object _new_record(object job_id, object state, object flags, object repl, object etime,
                        object ctime, object delay, object retry, object nacks,
                        object deliveries, object queue, object body, object nodes)

# job_record, callable from C too: job_records calls it once a job without a Python call.
cpdef object job_record(object job, object node_name, object now_ms, bint for_bus=*)
