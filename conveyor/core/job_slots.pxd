# The C helpers of job_slots.h, for the compiled modules that cimport them (records.pxd,
# job_alloc.pxd); a declaration file only, with no module of its own.
cdef extern from "conveyor/core/job_slots.h":
    bint _learn_slots "conveyor_learn_slots" (object job_type, object names,
                                              Py_ssize_t *offsets, Py_ssize_t capacity)
    object _slot "conveyor_slot" (object job, Py_ssize_t offset)
    void _fill "conveyor_fill_slot" (object job, Py_ssize_t offset, object value)
    void _set_slot "conveyor_set_slot" (object job, Py_ssize_t offset, object value)
    int _copy_slot "conveyor_copy_slot" (object job, object source, Py_ssize_t offset) except -1
    object _alloc_untracked "conveyor_alloc_untracked" (object type_, Py_ssize_t items)
    object _record_in_place "conveyor_record_in_place" (
        object type_, object job_id, object state, object gc_retry, object flags, object repl,
        object etime, object ctime, object delay, object retry, object nacks,
        object deliveries, object queue, object body, object nodes)
