/* Shared by the compiled twins (dsan/_classrows.c, dsan/_headscan.c): numpy arrays taken as
 * C-contiguous buffers of one dtype. Anything else raises TypeError, on which the Python
 * callers fall back to the numpy twin, so a strided view or another dtype is never an error.
 */
#ifndef DSAN_BUFFER_H
#define DSAN_BUFFER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* o's buffer in b if it is C-contiguous with struct format fmt and item size size (writable
 * if asked); 0, or -1 with TypeError set and nothing held. */
static int dsan_buffer(PyObject *o, Py_buffer *b, const char *fmt, Py_ssize_t size,
                       int writable)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, b, flags) < 0) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "a C-contiguous array of the expected dtype");
        return -1;
    }
    const char *f = b->format;
    if (f[0] == '<' || f[0] == '=' || f[0] == '@')
        f++;
    /* numpy's int64 is 'l' where long has 8 bytes, else 'q' */
    if (b->itemsize != size
        || !(strcmp(f, fmt) == 0
             || (fmt[0] == 'q' && strcmp(f, "l") == 0 && sizeof(long) == 8))) {
        PyBuffer_Release(b);
        PyErr_SetString(PyExc_TypeError, "an array of another dtype than expected");
        return -1;
    }
    return 0;
}

/* Release b and raise the shape TypeError; -1. */
static int dsan_bad_shape(Py_buffer *b)
{
    PyBuffer_Release(b);
    PyErr_SetString(PyExc_TypeError, "an array of another dtype or shape than expected");
    return -1;
}

#endif
