/* The per-row tail of dsan.rowfeatures' few-row featurizer, compiled: the C twin of
 * dsan.rowkernel.fill_py (read that first; this file mirrors it expression by expression).
 *
 * Why C: a settle featurizes one or two rows, and ~70 float64 expressions per row on Python
 * floats cost ~25 us per row in the interpreter; here they cost well under one.
 * Why it stays exact: every value is the same IEEE double expression in the same order
 * (built with -ffp-contract=off, so no fused multiply-adds), Python's min / max / // are
 * reproduced with their NaN and signed-zero behaviour (py_max, py_min, py_floordiv), and
 * the one transcendental (numpy's exp, which libm's may differ from in the last bit) is
 * computed by the caller. tests/unit/test_rowkernel.py pins both twins to featurize.
 * (Not the sign of a NaN: where two NaNs meet in a + or a *, GCC may swap the operands.)
 *
 * fill_rows, the entry the featurizer calls, reads the node's values from the snapshot's
 * arrays (int32 counts and shares, float64 amounts; TypeError on anything else, and the
 * Python caller runs fill_rows_py) and copies the node block, then writes each row with the
 * same write_row as fill (dsan/_rowtail.h, the row writer both entries share).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <limits.h>
#include <string.h>

#include "_buffer.h"
#include "_rowtail.h"

/* fill(x, q, pv, nt, scales, divs, n_shapes, start, items): see dsan.rowkernel.fill_py. */
static PyObject *fill(PyObject *self, PyObject *args)
{
    PyObject *xo, *qo, *pvo, *divso, *itemso;
    int nt, n_shapes, start;
    Common c;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOi(ddd)OiiO", &xo, &qo, &pvo, &nt, &c.cpu_scale,
                          &c.mem_scale, &c.gpu_scale, &divso, &n_shapes, &start, &itemso))
        return NULL;
    if (parse_common(pvo, nt, divso, n_shapes, &c) < 0)
        return NULL;
    PyObject *items = PySequence_Fast(itemso, "items");
    if (items == NULL)
        return NULL;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(items);
    Py_buffer xb, qb;
    if (PyObject_GetBuffer(xo, &xb, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        Py_DECREF(items);
        return NULL;
    }
    if (PyObject_GetBuffer(qo, &qb, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&xb);
        Py_DECREF(items);
        return NULL;
    }
    PyObject *ret = NULL;
    Py_ssize_t width = 0;
    const Py_ssize_t tail = nt + 20 + 40 + n_shapes;
    if (xb.ndim != 2 || xb.itemsize != 4 || strcmp(xb.format, "f") != 0 || xb.shape[0] != m
        || qb.ndim != 2 || qb.itemsize != 8 || strcmp(qb.format, "d") != 0 || qb.shape[0] != m
        || qb.shape[1] != N_QUANT) {
        PyErr_SetString(PyExc_ValueError, "x: (m, F) float32 and q: (m, 7) float64 expected");
        goto done;
    }
    width = xb.shape[1];
    /* The tail (pod, node-vs-pod and shape columns) from column start, then zeros. */
    if (start < 0 || start + tail > width) {
        PyErr_SetString(PyExc_ValueError, "x is narrower than the featurized tail");
        goto done;
    }
    for (Py_ssize_t r = 0; r < m; r++) {
        PyObject *it = PySequence_Fast_GET_ITEM(items, r);
        PyObject *free_o, *pods_o, *fafter_o, *access_o;
        double model_ok;
        Row in;
        if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != N_ITEM) {
            PyErr_SetString(PyExc_ValueError, "each item: a tuple of 16 entries");
            goto done;
        }
        if (!PyArg_ParseTuple(it, "lddddOOdddddlOdO", &in.cnt, &in.c0, &in.c1, &in.cpu_used,
                              &in.mem_used, &free_o, &pods_o, &in.price, &in.image, &model_ok,
                              &in.before, &in.frag_after, &in.slot, &fafter_o, &in.fgd,
                              &access_o))
            goto done;
        (void)model_ok; /* its column is shape1_room_gpu_bound now */
        in.nfree = ints(free_o, in.free, MAX_GPUS, "free");
        if (in.nfree < 0 || row_lists(fafter_o, access_o, n_shapes, &in) < 0)
            goto done;
        if (in.nfree == 0) {
            PyErr_SetString(PyExc_ValueError, "free: no slots");
            goto done;
        }
        in.has_pods = pods_o != Py_None;
        in.pods = in.has_pods ? PyFloat_AsDouble(pods_o) : 0.0;
        if (in.has_pods && in.pods == -1.0 && PyErr_Occurred())
            goto done;
        if (write_row(&c, &in, (float *)xb.buf + r * width, width, start,
                      (double *)qb.buf + r * N_QUANT) < 0)
            goto done;
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    PyBuffer_Release(&xb);
    PyBuffer_Release(&qb);
    Py_DECREF(items);
    return ret;
}

/* A 1-D column of n entries (or, with two_d, an (n, MAX_GPUS) one) of format fmt; -1 with
 * TypeError otherwise. */
static int column(PyObject *o, Py_buffer *b, const char *fmt, Py_ssize_t size, Py_ssize_t n,
                  int two_d)
{
    if (dsan_buffer(o, b, fmt, size, 0) < 0)
        return -1;
    if (b->ndim != (two_d ? 2 : 1) || (n >= 0 && b->shape[0] != n)
        || (two_d && b->shape[1] != MAX_GPUS))
        return dsan_bad_shape(b);
    return 0;
}

enum { C_COUNT, C_CPU_CAP, C_MEM_CAP, C_CPU_USED, C_MEM_USED, C_FREE, C_PODS, C_PRICE, N_COLS };

/* fill_rows(x, q, pv, nt, scales, divs, n_shapes, start, age0, node_cols, cols, rows, extra):
 * see dsan.rowkernel.fill_rows_py. Arrays of another dtype or layout raise TypeError (the
 * caller then runs the Python twin, which rewrites every entry of x and q). */
static PyObject *fill_rows(PyObject *self, PyObject *args)
{
    PyObject *xo, *qo, *pvo, *divso, *nodeo, *colso, *rowso, *extrao;
    int nt, n_shapes, start, age0;
    Common c;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOi(ddd)OiiiOO!OO", &xo, &qo, &pvo, &nt, &c.cpu_scale,
                          &c.mem_scale, &c.gpu_scale, &divso, &n_shapes, &start, &age0, &nodeo,
                          &PyTuple_Type, &colso, &rowso, &extrao))
        return NULL;
    if (PyTuple_GET_SIZE(colso) != N_COLS) {
        PyErr_SetString(PyExc_TypeError, "cols: a tuple of 8 columns");
        return NULL;
    }
    if (parse_common(pvo, nt, divso, n_shapes, &c) < 0)
        return NULL;
    Py_buffer xb, qb, nb, cb[N_COLS];
    int held[N_COLS] = {0};
    int have_x = 0, have_q = 0, have_n = 0;
    PyObject *rows = NULL, *extra = NULL, *ret = NULL;
    if (dsan_buffer(xo, &xb, "f", 4, 1) < 0)
        goto done;
    have_x = 1;
    if (dsan_buffer(qo, &qb, "d", 8, 1) < 0)
        goto done;
    have_q = 1;
    if (dsan_buffer(nodeo, &nb, "f", 4, 0) < 0)
        goto done;
    have_n = 1;
    const Py_ssize_t m = xb.ndim == 2 ? xb.shape[0] : -1;
    if (xb.ndim != 2 || qb.ndim != 2 || qb.shape[0] != m || qb.shape[1] != N_QUANT
        || nb.ndim != 2 || nb.shape[0] != m || nb.shape[1] != start || age0 < 0
        || age0 > start) {
        PyErr_SetString(PyExc_TypeError, "x, q or node_cols of another shape than expected");
        goto done;
    }
    const Py_ssize_t width = xb.shape[1];
    if (start < 0 || start + nt + 60 + n_shapes > width) {
        PyErr_SetString(PyExc_ValueError, "x is narrower than the featurized tail");
        goto done;
    }
    Py_ssize_t n = -1;
    for (int i = 0; i < N_COLS; i++) {
        PyObject *o = PyTuple_GET_ITEM(colso, i);
        if ((i == C_PODS || i == C_PRICE) && o == Py_None)
            continue;
        int is_int = i == C_COUNT || i == C_FREE || i == C_PODS;
        if (column(o, &cb[i], is_int ? "i" : "d", is_int ? 4 : 8, n, i == C_FREE) < 0)
            goto done;
        held[i] = 1;
        n = cb[i].shape[0];
    }
    rows = PySequence_Fast(rowso, "rows");
    extra = rows == NULL ? NULL : PySequence_Fast(extrao, "extra");
    if (extra == NULL)
        goto done;
    if (PySequence_Fast_GET_SIZE(rows) != m || PySequence_Fast_GET_SIZE(extra) != m) {
        PyErr_SetString(PyExc_ValueError, "rows and extra: one entry per row of x");
        goto done;
    }
    const int *count = cb[C_COUNT].buf, *gfree = cb[C_FREE].buf;
    const int *pods = held[C_PODS] ? cb[C_PODS].buf : NULL;
    const double *cpu_cap = cb[C_CPU_CAP].buf, *mem_cap = cb[C_MEM_CAP].buf;
    const double *cpu_used = cb[C_CPU_USED].buf, *mem_used = cb[C_MEM_USED].buf;
    const double *price = held[C_PRICE] ? cb[C_PRICE].buf : NULL;
    for (Py_ssize_t r = 0; r < m; r++) {
        Py_ssize_t j = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(rows, r));
        if (j == -1 && PyErr_Occurred())
            goto done;
        if (j < 0)
            j += n; /* as numpy's .item(j) reads it */
        if (j < 0 || j >= n) {
            PyErr_SetString(PyExc_IndexError, "row out of range");
            goto done;
        }
        PyObject *it = PySequence_Fast_GET_ITEM(extra, r);
        PyObject *fafter_o, *access_o;
        Row in;
        if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 7) {
            PyErr_SetString(PyExc_ValueError, "each extra: a tuple of 7 entries");
            goto done;
        }
        if (!PyArg_ParseTuple(it, "dddlOdO", &in.image, &in.before, &in.frag_after, &in.slot,
                              &fafter_o, &in.fgd, &access_o)
            || row_lists(fafter_o, access_o, n_shapes, &in) < 0)
            goto done;
        in.cnt = count[j];
        in.c0 = cpu_cap[j];
        in.c1 = mem_cap[j];
        in.cpu_used = cpu_used[j];
        in.mem_used = mem_used[j];
        in.nfree = MAX_GPUS;
        for (int g = 0; g < MAX_GPUS; g++)
            in.free[g] = gfree[j * MAX_GPUS + g];
        in.has_pods = pods != NULL;
        in.pods = pods != NULL ? (double)pods[j] : 0.0;
        in.price = price != NULL ? price[j] : 1.0;
        float *dst = (float *)xb.buf + r * width;
        /* the node block, its age columns zeroed (they are request columns) */
        memcpy(dst, (const float *)nb.buf + r * start, (size_t)start * sizeof(float));
        for (Py_ssize_t i = age0; i < start; i++)
            dst[i] = 0.0f;
        if (write_row(&c, &in, dst, width, start, (double *)qb.buf + r * N_QUANT) < 0)
            goto done;
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    for (int i = 0; i < N_COLS; i++)
        if (held[i])
            PyBuffer_Release(&cb[i]);
    if (have_x)
        PyBuffer_Release(&xb);
    if (have_q)
        PyBuffer_Release(&qb);
    if (have_n)
        PyBuffer_Release(&nb);
    Py_XDECREF(rows);
    Py_XDECREF(extra);
    return ret;
}

static PyMethodDef methods[] = {
    {"fill", fill, METH_VARARGS,
     "fill(x, q, pv, nt, scales, divs, n_shapes, start, items): the C twin of "
     "dsan.rowkernel.fill_py."},
    {"fill_rows", fill_rows, METH_VARARGS,
     "fill_rows(x, q, pv, nt, scales, divs, n_shapes, start, age0, node_cols, cols, rows, "
     "extra): the C twin of dsan.rowkernel.fill_rows_py."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dsan._rowkernel", "The few-row featurizer's per-row tail in C.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rowkernel(void) { return PyModule_Create(&module); }
