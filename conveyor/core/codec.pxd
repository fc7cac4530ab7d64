# Declarations for compiling codec.py with Cython (`make compile`); pure Python never
# reads this file. In _decode_bytes the input is bytes, read in place through `chars`,
# and the offsets and lengths are C integers: each is bounded by the input's length, so
# none can overflow; the fixed-width fields are widened before each shift (_u32_at). (The module's
# own annotations are not read as C types: `# cython: annotation_typing=False`.)
import cython

# The buffer of a bytes object, read in place.
ctypedef const unsigned char* ubytes

@cython.locals(value=cython.Py_ssize_t)
cdef Py_ssize_t _u16_at(ubytes chars, Py_ssize_t pos)
@cython.locals(value=cython.Py_ssize_t)
cdef Py_ssize_t _u32_at(ubytes chars, Py_ssize_t pos)
@cython.locals(high=cython.ulonglong)
cdef unsigned long long _u64_at(ubytes chars, Py_ssize_t pos)

# A record allocated at its size and filled in place (job_slots.h).
from conveyor.core.job_slots cimport _record_in_place

@cython.locals(size=cython.Py_ssize_t, end=cython.Py_ssize_t, pos=cython.Py_ssize_t,
               joblen=cython.Py_ssize_t, qlen=cython.Py_ssize_t, blen=cython.Py_ssize_t,
               count=cython.Py_ssize_t, byte40=cython.int, last_names=bytes, chars=ubytes)
cpdef tuple _decode_bytes(bytes data, Py_ssize_t offset, Py_ssize_t base)

# encode_job's writer (compiled only): each argument converted to its field's C type at
# the call, raising OverflowError when out of range; the record written in place.
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memcpy

@cython.locals(qlen=cython.Py_ssize_t, blen=cython.Py_ssize_t, out=bytes, p=cython.p_uchar)
cdef bytes _write_record(Py_ssize_t joblen, bytes job_id, unsigned char state_byte,
                         unsigned char flags, unsigned short repl, unsigned int etime,
                         unsigned long long ctime, unsigned int delay, unsigned int retry,
                         unsigned short nacks, unsigned short deliveries, bytes queue,
                         bytes body, bytes nodes_area)
cdef void _put_u16(unsigned char* p, unsigned short value) noexcept
cdef void _put_u32(unsigned char* p, unsigned int value) noexcept
cdef void _put_u64(unsigned char* p, unsigned long long value) noexcept

# The smallest length prefix (module constant), a C integer in the arithmetic around it.
cdef Py_ssize_t _MIN_JOBLEN

# encode_job: the record unpacked from a tuple in place (`fields`), lengths as C integers.
@cython.locals(fields=tuple, qlen=cython.Py_ssize_t, blen=cython.Py_ssize_t,
               joblen=cython.Py_ssize_t)
cpdef bytes encode_job(object record)
