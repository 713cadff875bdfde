# cython: language_level=3
"""The making of PageTag objects: fields checked as u32, and the object left out of the cycle collector.

A PageTag is a tuple of five ints with no instance dict, so it can never be part of a reference
cycle. CPython already stops tracking plain tuples of ints; it never does so for a tuple subclass,
so every PageTag a program holds would be walked by each full collection (a million held tags add
tens of milliseconds to every one). Untracking them here gives the library's own key type the cost
of a plain tuple.
"""
import operator

from cpython.long cimport PyLong_AsUnsignedLongLong, PyLong_CheckExact

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void* op)

cdef tuple _FIELDS = ("spc", "db", "rel", "fork", "block")
_new = tuple.__new__


cdef object _field(object v, int i):
    cdef unsigned long long x
    if not PyLong_CheckExact(v):
        try:
            v = int(operator.index(v))   # an exact int: nothing the tag holds can reach back to it
        except TypeError:
            raise TypeError(f"PageTag.{_FIELDS[i]} must be an int, not {type(v).__name__}") from None
    try:
        x = PyLong_AsUnsignedLongLong(v)
    except OverflowError:
        x = 0x100000000ULL              # negative or beyond u64: reported below like any too-big value
    if x > 0xFFFFFFFFULL:
        raise ValueError(f"PageTag.{_FIELDS[i]} must fit in u32, got {v}")
    return v


def make_tag(cls, spc, db, rel, fork, block):
    """A new `cls` (a tuple subclass) of the five checked fields, untracked by the collector."""
    t = _new(cls, (_field(spc, 0), _field(db, 1), _field(rel, 2), _field(fork, 3), _field(block, 4)))
    PyObject_GC_UnTrack(<void*>t)
    return t


def adopt_tags(cls, rows) -> list:
    """`cls` objects of rows already known to be five u32 ints each (from an array or 20 bytes)."""
    out = []
    for r in rows:
        t = _new(cls, r)
        PyObject_GC_UnTrack(<void*>t)
        out.append(t)
    return out
