# Declarations for compiling codec.py with Cython (`make compile`); pure Python never
# reads this file. In _decode_bytes the input is bytes and the offsets and lengths are C
# integers: each is bounded by the input's length, so none can overflow. (The module's
# own annotations are not read as C types: `# cython: annotation_typing=False`.)
import cython

@cython.locals(size=cython.Py_ssize_t, end=cython.Py_ssize_t, pos=cython.Py_ssize_t,
               joblen=cython.Py_ssize_t, qlen=cython.Py_ssize_t, blen=cython.Py_ssize_t,
               count=cython.Py_ssize_t, head=tuple, byte40=cython.int, last_names=bytes)
cpdef tuple _decode_bytes(bytes data, Py_ssize_t offset, Py_ssize_t base)
