/* A Job's slots (conveyor/core/job.py), read and written in place by the compiled
 * modules (records.pxd, job_alloc.pxd; `make compile`). Pure Python never reads this.
 *
 * Compiled code reading `job.id` goes through the generic attribute lookup (~90
 * instructions); making a Job through its class runs a Python-level __init__ (~3.5k).
 * A __slots__ class keeps each slot at a fixed offset, which its member descriptor
 * states: learnt once at import, a slot is then one load or one store. The offsets are
 * only used on an object whose type is exactly the one they were learnt from.
 */
#ifndef CONVEYOR_JOB_SLOTS_H
#define CONVEYOR_JOB_SLOTS_H

#include <Python.h>
#include <structmember.h>

/* The offsets of `names` (a tuple of str, at most `capacity`) in `type`, into
 * `offsets`: 1 when each is a plain object slot of the type's own; 0 otherwise, with
 * no error set (the caller then keeps to ordinary attribute access). */
static inline int conveyor_learn_slots(PyObject *type, PyObject *names, Py_ssize_t *offsets,
                                Py_ssize_t capacity) {
    Py_ssize_t i, count;
    if (!PyType_Check(type) || !PyTuple_Check(names)) return 0;
    count = PyTuple_GET_SIZE(names);
    if (count > capacity) return 0;
    for (i = 0; i < count; i++) {
        PyObject *descr = PyDict_GetItemWithError(((PyTypeObject *)type)->tp_dict,
                                                  PyTuple_GET_ITEM(names, i));
        PyMemberDef *member;
        if (descr == NULL || Py_TYPE(descr) != &PyMemberDescr_Type) {
            PyErr_Clear();
            return 0;
        }
        member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != T_OBJECT_EX || member->flags & READONLY ||
            member->offset < (Py_ssize_t)sizeof(PyObject)) {
            return 0;
        }
        offsets[i] = member->offset;
    }
    return 1;
}

/* The slot at `offset`, as reading the attribute gives it: a new reference, or
 * AttributeError when it was never set. */
static inline PyObject *conveyor_slot(PyObject *obj, Py_ssize_t offset) {
    PyObject *value = *(PyObject **)((char *)obj + offset);
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a Job slot was never set");
        return NULL;
    }
    Py_INCREF(value);
    return value;
}

/* Sets the slot at `offset` of an object just allocated (the slot still NULL). */
static inline void conveyor_fill_slot(PyObject *obj, Py_ssize_t offset, PyObject *value) {
    Py_INCREF(value);
    *(PyObject **)((char *)obj + offset) = value;
}

/* Sets the slot at `offset` to `value`, dropping what it held before (if anything). */
static inline void conveyor_set_slot(PyObject *obj, Py_ssize_t offset, PyObject *value) {
    PyObject **slot = (PyObject **)((char *)obj + offset);
    PyObject *old = *slot;
    Py_INCREF(value);
    *slot = value;
    Py_XDECREF(old);
}

/* Sets the slot at `offset` of an object just allocated to what `source` (of the same
 * type) holds there: 0, or -1 with AttributeError when that slot was never set. */
static inline int conveyor_copy_slot(PyObject *obj, PyObject *source, Py_ssize_t offset) {
    PyObject *value = *(PyObject **)((char *)source + offset);
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a Job slot was never set");
        return -1;
    }
    conveyor_fill_slot(obj, offset, value);
    return 0;
}

/* A zeroed instance of `type` (`items`: its length, for a tuple subclass), out of the
 * cycle collector's sight: only for objects that can never be part of a reference
 * cycle (a Job, a JobRecord: ints, bytes, None and tuples of bytes). */
static inline PyObject *conveyor_alloc_untracked(PyObject *type, Py_ssize_t items) {
    PyTypeObject *tp = (PyTypeObject *)type;
    PyObject *obj;
    if (!PyType_Check(type)) {
        PyErr_SetString(PyExc_TypeError, "not a type");
        return NULL;
    }
    obj = tp->tp_alloc(tp, items);
    if (obj != NULL && PyObject_IS_GC(obj) && PyObject_GC_IsTracked(obj)) {
        PyObject_GC_UnTrack(obj);
    }
    return obj;
}

/* A JobRecord (`type`: a tuple subclass of 14 items) holding these values, allocated at
 * its size and filled in place, out of the collector's sight as above: where
 * tuple.__new__(JobRecord, items) makes and copies a temporary tuple through a type
 * call. Every record decoded (core/codec.py) or made from a job (core/records.py). */
static inline PyObject *conveyor_record_in_place(
    PyObject *type, PyObject *job_id, PyObject *state, PyObject *gc_retry, PyObject *flags,
    PyObject *repl, PyObject *etime, PyObject *ctime, PyObject *delay, PyObject *retry,
    PyObject *nacks, PyObject *deliveries, PyObject *queue, PyObject *body,
    PyObject *nodes) {
    PyObject *items[14] = {job_id, state, gc_retry, flags, repl, etime, ctime,
                           delay, retry, nacks, deliveries, queue, body, nodes};
    PyObject *record;
    Py_ssize_t i;
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "not a tuple type");
        return NULL;
    }
    record = conveyor_alloc_untracked(type, 14);
    if (record == NULL) return NULL;
    for (i = 0; i < 14; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(record, i, items[i]);
    }
    return record;
}

#endif
