/* The end of ClassRows.update (dsan/model/rowcache.py), compiled: the C twin of
 * dsan.model.classrows.store_py (read that first; this mirrors it operation by operation).
 *
 * Why C: after the first-layer matmul, a settle's one or two recomputed rows are stored in
 * ~10 numpy calls on (2, 65)-sized arrays (~15 us, all per-call cost); here one loop.
 * Why it stays exact: every value is the same float32 addition or multiplication as
 * numpy's elementwise ufuncs (built with -ffp-contract=off: no fused multiply-adds), a
 * maximum (order-free; a NaN makes numpy's maximum NaN, so the row is not dead there
 * either), and copies. The matmul and the attention reduction stay in numpy.
 */
#include "_buffer.h"
#include "_firstsum.h"
#include "_storerows.h"
#include <math.h>
#include <string.h>

/* A C-contiguous buffer of the given format, item size and dimensions; TypeError (the
 * caller then takes the numpy twin) otherwise. */
static int get(PyObject *o, Py_buffer *b, const char *fmt, Py_ssize_t size, int ndim,
               int writable)
{
    if (dsan_buffer(o, b, fmt, size, writable) < 0)
        return -1;
    return b->ndim == ndim ? 0 : dsan_bad_shape(b);
}

#define N_BUF 12

/* store(first, h, rows, bias, req_top, req_age, ages, pre, present, dead, quant, q, at,
 * tick): see dsan.model.classrows.store_py. ages is None without telemetry. */
static PyObject *store(PyObject *self, PyObject *args)
{
    PyObject *o[N_BUF];
    long long tick;
    Py_ssize_t h;
    (void)self;
    if (!PyArg_ParseTuple(args, "OnOOOOOOOOOOOL", &o[0], &h, &o[1], &o[2], &o[3], &o[4],
                          &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &tick))
        return NULL;
    /* first rows bias req_top req_age ages pre present dead quant q at */
    static const char *fmt[N_BUF] = {"f", "q", "f", "f", "f", "d", "f", "f", "?", "d", "d", "q"};
    static const Py_ssize_t size[N_BUF] = {4, 8, 4, 4, 4, 8, 4, 4, 1, 8, 8, 8};
    static const int ndim[N_BUF] = {2, 1, 1, 1, 1, 1, 2, 1, 1, 2, 2, 1};
    static const int writable[N_BUF] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1};
    Py_buffer b[N_BUF];
    int got = 0;
    PyObject *ret = NULL;
    const int has_ages = o[5] != Py_None;
    for (; got < N_BUF; got++) {
        if (got == 5 && !has_ages)
            continue;
        if (get(o[got], &b[got], fmt[got], size[got], ndim[got], writable[got]) < 0)
            goto done;
    }
    /* first: (m, h + w), the first layer's outputs; its last w columns are p2 */
    const Py_ssize_t m = b[0].shape[0], w = b[0].shape[1] - h, h2 = b[3].shape[0];
    const Py_ssize_t n = b[6].shape[0];
    if (h < 0 || w < 1 || b[1].shape[0] != m || b[2].shape[0] != w || h2 >= w || b[4].shape[0] != h2
        || b[6].shape[1] != w || b[7].shape[0] != n || b[8].shape[0] != n
        || b[9].shape[0] != 7 || b[9].shape[1] != n || b[10].shape[0] != m
        || b[10].shape[1] != 7 || b[11].shape[0] != n || (has_ages && b[5].shape[0] != n)) {
        PyErr_SetString(PyExc_TypeError, "arrays of inconsistent shapes");
        goto done;
    }
    const float *first = b[0].buf, *bias = b[2].buf, *top_add = b[3].buf, *req_age = b[4].buf;
    const long long *rows = b[1].buf;
    const double *ages = has_ages ? b[5].buf : NULL, *q = b[10].buf;
    float *pre = b[6].buf, *present = b[7].buf;
    char *dead = b[8].buf;
    double *quant = b[9].buf;
    long long *at = b[11].buf;
    for (Py_ssize_t k = 0; k < m; k++) {
        long long r = rows[k];
        if (r < 0)
            r += n;
        if (r < 0 || r >= n) {
            PyErr_Format(PyExc_IndexError, "index %lld is out of bounds for size %zd",
                         rows[k], n);
            goto done;
        }
    }
    const Store s = {n, h, w, h2, bias, top_add, req_age, ages, pre, present, dead, quant, at};
    store_rows(&s, first, rows, m, q, tick);
    ret = Py_None;
    Py_INCREF(ret);
done:
    for (int i = 0; i < got; i++)
        if (!(i == 5 && !has_ages))
            PyBuffer_Release(&b[i]);
    return ret;
}

/* first(x, w, c0, out): see dsan.model.classrows.first_py. */
static PyObject *first(PyObject *self, PyObject *args)
{
    PyObject *o[3];
    Py_ssize_t c0;
    Py_buffer b[3];
    int got = 0;
    PyObject *ret = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOnO", &o[0], &o[1], &c0, &o[2]))
        return NULL;
    for (; got < 3; got++)
        if (get(o[got], &b[got], "f", 4, 2, got == 2) < 0)
            goto done;
    const Py_ssize_t m = b[0].shape[0], f = b[0].shape[1], k = b[1].shape[1];
    if (b[1].shape[0] != f || b[2].shape[0] != m || b[2].shape[1] != k || f < 1 || c0 < 0
        || c0 > k) {
        PyErr_SetString(PyExc_TypeError, "x (m, f), w (f, k) and out (m, k) expected");
        goto done;
    }
    first_sum(b[0].buf, m, f, b[1].buf, k, c0, b[2].buf);
    ret = Py_None;
    Py_INCREF(ret);
done:
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&b[i]);
    return ret;
}

static PyMethodDef methods[] = {
    {"first", first, METH_VARARGS,
     "first(x, w, c0, out): the C twin of dsan.model.classrows.first_py."},
    {"store", store, METH_VARARGS,
     "store(p2, rows, bias, req_top, req_age, ages, pre, present, dead, quant, q, at, tick)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dsan._classrows",
    "The end of ClassRows.update in C (dsan.model.classrows.store_py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__classrows(void) { return PyModule_Create(&module); }
