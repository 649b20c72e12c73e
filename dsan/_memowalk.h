/* The placement memo's walk for dsan/_memorows.c: the C of dsan.placementmemo.recall_py
 * (a row's state key, the two memo lookups, the entry's writes) and of dsan.rowfeatures'
 * FGD-score memo read. Read dsan/_memorows.c first for why the keys match Python's.
 */
#ifndef DSAN_MEMOWALK_H
#define DSAN_MEMOWALK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_buffer.h"

#ifndef MAX_GPUS
#define MAX_GPUS 8
#endif

/* The arrays the walk reads and writes (PlacementCache.memo's, the snapshot's key columns). */
typedef struct {
    double *e_before, *e_after;
    long long *e_slot, *e_free, *e_at;
    const long long *epoch;
    double *before;
    long long *before_at;
    const double *cpu_cap, *cpu_used;
    const int *count, *model, *gpu_free;
} Walk;

/* dsan.placementmemo._key_of(row j): (free CPU, GPU count, GPU model, free shares as bytes). */
static PyObject *state_key(const Walk *a, Py_ssize_t j)
{
    PyObject *key = PyTuple_New(4);
    if (key == NULL)
        return NULL;
    PyObject *v[4] = {
        PyFloat_FromDouble(a->cpu_cap[j] - a->cpu_used[j]), PyLong_FromLong(a->count[j]),
        PyLong_FromLong(a->model[j]),
        PyBytes_FromStringAndSize((const char *)(a->gpu_free + j * MAX_GPUS),
                                  MAX_GPUS * sizeof(int))};
    for (int i = 0; i < 4; i++) {
        if (v[i] == NULL) {
            for (int k = i + 1; k < 4; k++)
                Py_XDECREF(v[k]);
            Py_DECREF(key);
            return NULL;
        }
        PyTuple_SET_ITEM(key, i, v[i]); /* steals */
    }
    return key;
}

/* recall_py for row j: 1 recalled (or current), 0 a memo miss, -1 an error. */
static int recall(const Walk *a, Py_ssize_t j, PyObject *shape, long long tick, PyObject *mb,
                  PyObject *ma)
{
    if (a->e_at[j] >= a->epoch[j])
        return 1;
    PyObject *key = state_key(a, j);
    if (key == NULL)
        return -1;
    int ret = -1;
    PyObject *pair = NULL;
    if (a->before_at[j] < a->epoch[j]) {
        PyObject *b = PyDict_GetItemWithError(mb, key); /* borrowed */
        if (b == NULL) {
            ret = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
        double v = PyFloat_AsDouble(b);
        if (v == -1.0 && PyErr_Occurred())
            goto done;
        a->before[j] = v;
        a->before_at[j] = tick;
    }
    pair = PyTuple_Pack(2, shape, key);
    PyObject *got = pair == NULL ? NULL : PyDict_GetItemWithError(ma, pair);
    if (got == NULL) {
        ret = pair != NULL && !PyErr_Occurred() ? 0 : -1;
        goto done;
    }
    /* (frag_after, slot, free_after): a float, an int and an int64 array of MAX_GPUS */
    if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 3) {
        PyErr_SetString(PyExc_TypeError, "a memo value of another form");
        goto done;
    }
    double after = PyFloat_AsDouble(PyTuple_GET_ITEM(got, 0));
    long slot = PyLong_AsLong(PyTuple_GET_ITEM(got, 1));
    if (PyErr_Occurred())
        goto done;
    Py_buffer fb;
    if (dsan_buffer(PyTuple_GET_ITEM(got, 2), &fb, "q", 8, 0) < 0)
        goto done;
    if (fb.ndim != 1 || fb.shape[0] != MAX_GPUS) {
        dsan_bad_shape(&fb);
        goto done;
    }
    a->e_before[j] = a->before[j];
    a->e_after[j] = after;
    a->e_slot[j] = slot;
    memcpy(a->e_free + j * MAX_GPUS, fb.buf, MAX_GPUS * sizeof(long long));
    PyBuffer_Release(&fb);
    a->e_at[j] = tick;
    ret = 1;
done:
    Py_DECREF(key);
    Py_XDECREF(pair);
    return ret;
}

/* FGD's score of the clipped argument, as dsan.rowfeatures._fgd reads it: the memo's value,
 * or fgd_of(arg) (which fills the memo) on a miss. 0, or -1 with an exception set. */
static int fgd_score(double arg, PyObject *memo, PyObject *fgd_of, double *out)
{
    PyObject *k = PyFloat_FromDouble(arg);
    if (k == NULL)
        return -1;
    PyObject *v = PyDict_GetItemWithError(memo, k); /* borrowed */
    if (v != NULL)
        Py_INCREF(v);
    else if (!PyErr_Occurred())
        v = PyObject_CallOneArg(fgd_of, k);
    Py_DECREF(k);
    if (v == NULL)
        return -1;
    *out = PyFloat_AsDouble(v);
    Py_DECREF(v);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

#endif
