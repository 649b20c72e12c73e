/* A row tracker's sync on a few hinted rows, compiled: the C twin of
 * dsan.rowsync.sync_rows_py (read that first).
 *
 * Why C: a settle syncs two trackers (the placement cache's and the head cache's) on the
 * one or two rows the assumption wrote; in Python each compare reads numpy scalars and each
 * write is a numpy scalar or row assignment, ~4-8 us per tracker for a few rows.
 * Why it stays exact: the compares are the same typed != (a NaN differs from itself, -0.0
 * equals 0.0, as numpy's and Python's), and the writes are copies.
 */
#include "_buffer.h"
#include <string.h>

#define MAX_PAIRS 8

/* sync_rows(pairs, epoch, tick, rows) -> tick: see dsan.rowsync.sync_rows_py. */
static PyObject *sync_rows(PyObject *self, PyObject *args)
{
    PyObject *pairs, *epocho, *rowso, *rows = NULL;
    long long tick;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!OLO", &PyTuple_Type, &pairs, &epocho, &tick, &rowso))
        return NULL;
    const Py_ssize_t np_ = PyTuple_GET_SIZE(pairs);
    if (np_ > MAX_PAIRS) {
        PyErr_SetString(PyExc_ValueError, "too many column pairs");
        return NULL;
    }
    Py_buffer eb, was[MAX_PAIRS], now[MAX_PAIRS];
    int is_int[MAX_PAIRS];
    Py_ssize_t width[MAX_PAIRS];
    int held = 0, have_e = 0;
    PyObject *ret = NULL;
    if (dsan_buffer(epocho, &eb, "q", 8, 1) < 0)
        goto done;
    have_e = 1;
    const Py_ssize_t n = eb.shape[0];
    if (eb.ndim != 1) {
        PyErr_SetString(PyExc_TypeError, "epoch: one dimension");
        goto done;
    }
    for (; held < np_; held++) {
        PyObject *p = PyTuple_GET_ITEM(pairs, held);
        if (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) != 2) {
            PyErr_SetString(PyExc_TypeError, "pairs: (tracked, current) arrays");
            goto done;
        }
        /* float64 or int32 columns, the tracked one writable */
        PyObject *w = PyTuple_GET_ITEM(p, 0), *c = PyTuple_GET_ITEM(p, 1);
        is_int[held] = dsan_buffer(w, &was[held], "d", 8, 1) < 0;
        if (is_int[held]) {
            PyErr_Clear();
            if (dsan_buffer(w, &was[held], "i", 4, 1) < 0)
                goto done;
        }
        if (dsan_buffer(c, &now[held], is_int[held] ? "i" : "d", is_int[held] ? 4 : 8, 0) < 0) {
            PyBuffer_Release(&was[held]);
            goto done;
        }
        Py_buffer *a = &was[held], *b = &now[held];
        if (a->ndim < 1 || a->ndim > 2 || a->ndim != b->ndim || a->shape[0] != n
            || b->shape[0] != n || (a->ndim == 2 && a->shape[1] != b->shape[1])) {
            PyBuffer_Release(b);
            dsan_bad_shape(a); /* releases a, TypeError */
            goto done;
        }
        width[held] = a->ndim == 2 ? a->shape[1] : 1;
    }
    rows = PySequence_Fast(rowso, "rows: a sequence of ints");
    if (rows == NULL)
        goto done;
    const Py_ssize_t m = PySequence_Fast_GET_SIZE(rows);
    /* every row checked before anything is written, as the Python twin reads them all */
    for (Py_ssize_t r = 0; r < m; r++) {
        Py_ssize_t j = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(rows, r), PyExc_IndexError);
        if (j == -1 && PyErr_Occurred())
            goto done;
        if (j < -n || j >= n) {
            PyErr_SetString(PyExc_IndexError, "row out of range");
            goto done;
        }
    }
    long long *epoch = eb.buf;
    int bumped = 0;
    for (Py_ssize_t r = 0; r < m; r++) {
        Py_ssize_t j = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(rows, r), PyExc_IndexError);
        if (j < 0)
            j += n; /* as numpy's .item(j) reads it */
        int differs = 0;
        for (int i = 0; i < np_ && !differs; i++) {
            const Py_ssize_t w = width[i];
            for (Py_ssize_t c = 0; c < w && !differs; c++) {
                if (is_int[i])
                    differs = ((int *)was[i].buf)[j * w + c] != ((int *)now[i].buf)[j * w + c];
                else
                    differs = ((double *)was[i].buf)[j * w + c]
                              != ((double *)now[i].buf)[j * w + c];
            }
        }
        if (!differs)
            continue;
        if (!bumped) {
            tick += 1; /* one new tick for every row this sync finds changed */
            bumped = 1;
        }
        epoch[j] = tick;
        for (int i = 0; i < np_; i++) {
            const Py_ssize_t size = width[i] * (is_int[i] ? 4 : 8);
            memcpy((char *)was[i].buf + j * size, (char *)now[i].buf + j * size, size);
        }
    }
    ret = PyLong_FromLongLong(tick);
done:
    for (int i = 0; i < held; i++) {
        PyBuffer_Release(&was[i]);
        PyBuffer_Release(&now[i]);
    }
    if (have_e)
        PyBuffer_Release(&eb);
    Py_XDECREF(rows);
    return ret;
}

static PyMethodDef methods[] = {
    {"sync_rows", sync_rows, METH_VARARGS,
     "sync_rows(pairs, epoch, tick, rows) -> tick: the C twin of dsan.rowsync.sync_rows_py."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dsan._rowsync",
    "A row tracker's sync on a few hinted rows in C (dsan.rowsync.sync_rows_py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rowsync(void) { return PyModule_Create(&module); }
