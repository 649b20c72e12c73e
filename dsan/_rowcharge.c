/* A pod charged to (and released from) one node-table row, and rows copied out, compiled:
 * the C twin of sidecar.rowcharge's charge_py, uncharge_py and copy_rows_py (read those
 * first).
 *
 * Why C: every assumption (after each reply, on the path of a back-to-back next request)
 * uncharges the pod's previous assumption, charges the winner and copies both rows into the
 * published snapshot; in Python that is a dozen numpy scalar reads and writes, a best-fit
 * sort and a row copy per column, ~10 us.
 * Why it stays exact: the arithmetic is the Python twin's (float64 adds and subtracts, int
 * adds, the same clamps), the best fit sorts the same (share, slot) pairs, and the copies are
 * copies. Every buffer is held and every index checked before the first write, so an error
 * (TypeError: the caller falls back to the Python twin) never leaves a row half written.
 */
#include "_buffer.h"
#include <string.h>

#define MAX_SLOTS 64

/* The five columns (cpu_used, mem_used, pod_count, gpu_count, gpu_free) of one table. */
typedef struct {
    Py_buffer cpu, mem, pods, count, free;
    int held;
    Py_ssize_t n, width;
} Cols;

static void cols_release(Cols *c)
{
    Py_buffer *b[5] = {&c->cpu, &c->mem, &c->pods, &c->count, &c->free};
    for (int k = 0; k < c->held; k++)
        PyBuffer_Release(b[k]);
    c->held = 0;
}

/* 0, or -1 with an exception set and nothing held. */
static int cols_get(PyObject *o, Cols *c)
{
    c->held = 0;
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "cols: (cpu_used, mem_used, pod_count, gpu_count, gpu_free)");
        return -1;
    }
    Py_buffer *b[5] = {&c->cpu, &c->mem, &c->pods, &c->count, &c->free};
    const char *fmt[5] = {"d", "d", "i", "i", "i"};
    const Py_ssize_t size[5] = {8, 8, 4, 4, 4};
    const int writable[5] = {1, 1, 1, 0, 1};
    for (int k = 0; k < 5; k++) {
        if (dsan_buffer(PyTuple_GET_ITEM(o, k), b[k], fmt[k], size[k], writable[k]) < 0) {
            cols_release(c);
            return -1;
        }
        c->held++;
        if (b[k]->ndim != (k == 4 ? 2 : 1) || b[k]->shape[0] != b[0]->shape[0]) {
            cols_release(c);
            PyErr_SetString(PyExc_TypeError, "cols: columns of one table's shapes");
            return -1;
        }
    }
    c->n = c->cpu.shape[0];
    c->width = c->free.shape[1];
    if (c->width > MAX_SLOTS) {
        cols_release(c);
        PyErr_SetString(PyExc_TypeError, "gpu_free: too many GPU slots per row");
        return -1;
    }
    return 0;
}

/* Row i as numpy reads a scalar index (negative from the end); -1 with IndexError. */
static Py_ssize_t row_of(Py_ssize_t i, Py_ssize_t n)
{
    if (i < -n || i >= n) {
        PyErr_SetString(PyExc_IndexError, "row out of range");
        return -1;
    }
    return i < 0 ? i + n : i;
}

/* Ascending (share, slot): the order Python's sorted() gives the twin's tuples. */
static void sort_pairs(long long *key, Py_ssize_t *slot, Py_ssize_t m)
{
    for (Py_ssize_t a = 1; a < m; a++) {
        long long k = key[a];
        Py_ssize_t s = slot[a], b = a - 1;
        while (b >= 0 && (key[b] > k || (key[b] == k && slot[b] > s))) {
            key[b + 1] = key[b];
            slot[b + 1] = slot[b];
            b--;
        }
        key[b + 1] = k;
        slot[b + 1] = s;
    }
}

/* charge(cols, i, cpu_milli, mem_mib, num_gpu, gpu_milli) -> (gpus, over): see
 * sidecar.rowcharge.charge_py. */
static PyObject *charge(PyObject *self, PyObject *args)
{
    PyObject *colso;
    Py_ssize_t i, num_gpu;
    long long milli;
    double cpu, mem;
    Cols c;
    (void)self;
    if (!PyArg_ParseTuple(args, "OnddnL", &colso, &i, &cpu, &mem, &num_gpu, &milli))
        return NULL;
    if (cols_get(colso, &c) < 0)
        return NULL;
    i = row_of(i, c.n);
    if (i < 0) {
        cols_release(&c);
        return NULL;
    }
    double *cpu_used = c.cpu.buf, *mem_used = c.mem.buf;
    int *pods = c.pods.buf, *free = (int *)c.free.buf + i * c.width;
    cpu_used[i] = cpu_used[i] + cpu;
    mem_used[i] = mem_used[i] + mem;
    pods[i] = pods[i] + 1;
    PyObject *gpus;
    int over = 0;
    if (num_gpu == 0 || milli == 0) {
        gpus = PyTuple_New(0);
    } else {
        /* free[:count] as Python slices it (a negative count counts from the end) */
        long long count = ((int *)c.count.buf)[i];
        Py_ssize_t m = count < 0 ? (Py_ssize_t)(count + c.width) : (Py_ssize_t)count;
        if (m < 0)
            m = 0;
        if (m > c.width)
            m = c.width;
        long long key[MAX_SLOTS];
        Py_ssize_t slot[MAX_SLOTS], fits = 0;
        for (Py_ssize_t g = 0; g < m; g++) {
            if (free[g] >= milli) {
                key[fits] = free[g];
                slot[fits++] = g;
            }
        }
        over = fits < num_gpu;
        if (over) {
            fits = 0;
            for (Py_ssize_t g = 0; g < m; g++) {
                key[fits] = -(long long)free[g];
                slot[fits++] = g;
            }
        }
        sort_pairs(key, slot, fits);
        Py_ssize_t take = num_gpu < 0 ? fits + num_gpu : num_gpu; /* fits[:num_gpu] */
        if (take < 0)
            take = 0;
        if (take > fits)
            take = fits;
        long long zero[MAX_SLOTS];
        for (Py_ssize_t k = 0; k < take; k++)
            zero[k] = 0;
        sort_pairs(zero, slot, take); /* the taken slots, ascending */
        gpus = PyTuple_New(take);
        for (Py_ssize_t k = 0; gpus != NULL && k < take; k++) {
            long long left = free[slot[k]] - milli;
            free[slot[k]] = (int)(left > 0 ? left : 0);
            PyObject *g = PyLong_FromSsize_t(slot[k]);
            if (g == NULL) {
                Py_CLEAR(gpus);
                break;
            }
            PyTuple_SET_ITEM(gpus, k, g);
        }
    }
    cols_release(&c);
    if (gpus == NULL)
        return NULL;
    return Py_BuildValue("(NO)", gpus, over ? Py_True : Py_False);
}

/* uncharge(cols, i, cpu_milli, mem_mib, gpu_milli, gpus): see
 * sidecar.rowcharge.uncharge_py. */
static PyObject *uncharge(PyObject *self, PyObject *args)
{
    PyObject *colso, *gpuso, *gpus = NULL;
    Py_ssize_t i;
    long long milli;
    double cpu, mem;
    Cols c;
    (void)self;
    if (!PyArg_ParseTuple(args, "OnddLO", &colso, &i, &cpu, &mem, &milli, &gpuso))
        return NULL;
    gpus = PySequence_Fast(gpuso, "gpus: a sequence of GPU slots");
    if (gpus == NULL)
        return NULL;
    if (cols_get(colso, &c) < 0) {
        Py_DECREF(gpus);
        return NULL;
    }
    i = row_of(i, c.n);
    const Py_ssize_t m = PySequence_Fast_GET_SIZE(gpus);
    Py_ssize_t slots[MAX_SLOTS];
    if (i >= 0 && m > MAX_SLOTS) {
        PyErr_SetString(PyExc_TypeError, "gpus: more slots than a row holds");
        i = -1;
    }
    for (Py_ssize_t k = 0; i >= 0 && k < m; k++) {
        slots[k] = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(gpus, k), PyExc_IndexError);
        if (slots[k] == -1 && PyErr_Occurred())
            i = -1;
        else if (slots[k] < 0 || slots[k] >= c.width) {
            /* the twin's contract: slots charge() gave, 0..7 */
            PyErr_SetString(PyExc_TypeError, "gpus: a slot outside the row");
            i = -1;
        }
    }
    if (i < 0) {
        cols_release(&c);
        Py_DECREF(gpus);
        return NULL;
    }
    double *cpu_used = c.cpu.buf, *mem_used = c.mem.buf;
    int *pods = c.pods.buf, *free = (int *)c.free.buf + i * c.width;
    double v = cpu_used[i] - cpu;
    cpu_used[i] = v > 0.0 ? v : 0.0; /* max(0.0, v): 0.0 unless v > 0 (NaN too) */
    v = mem_used[i] - mem;
    mem_used[i] = v > 0.0 ? v : 0.0;
    long long p = (long long)pods[i] - 1;
    pods[i] = (int)(p > 0 ? p : 0);
    const long long count = ((int *)c.count.buf)[i];
    for (Py_ssize_t k = 0; k < m; k++) {
        if (slots[k] < count) {
            long long f = (long long)free[slots[k]] + milli;
            free[slots[k]] = (int)(f < 1000 ? f : 1000);
        }
    }
    cols_release(&c);
    Py_DECREF(gpus);
    Py_RETURN_NONE;
}

#define MAX_PAIRS 8

/* copy_rows(pairs, rows): see sidecar.rowcharge.copy_rows_py. */
static PyObject *copy_rows(PyObject *self, PyObject *args)
{
    PyObject *pairso, *pairs = NULL, *rowso, *rows = NULL, *ret = NULL;
    Py_buffer dst[MAX_PAIRS], src[MAX_PAIRS];
    Py_ssize_t size[MAX_PAIRS];
    Py_ssize_t held = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &pairso, &rowso))
        return NULL;
    pairs = PySequence_Fast(pairso, "pairs: a sequence of (dst, src) arrays");
    if (pairs == NULL)
        return NULL;
    const Py_ssize_t np_ = PySequence_Fast_GET_SIZE(pairs);
    if (np_ > MAX_PAIRS) {
        PyErr_SetString(PyExc_TypeError, "too many column pairs");
        goto done;
    }
    Py_ssize_t n = -1;
    for (; held < np_; held++) {
        PyObject *p = PySequence_Fast_GET_ITEM(pairs, held);
        if (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) != 2) {
            PyErr_SetString(PyExc_TypeError, "pairs: (dst, src) arrays");
            goto done;
        }
        PyObject *d = PyTuple_GET_ITEM(p, 0), *s = PyTuple_GET_ITEM(p, 1);
        int is_int = dsan_buffer(d, &dst[held], "d", 8, 1) < 0;
        if (is_int) {
            PyErr_Clear();
            if (dsan_buffer(d, &dst[held], "i", 4, 1) < 0)
                goto done;
        }
        if (dsan_buffer(s, &src[held], is_int ? "i" : "d", is_int ? 4 : 8, 0) < 0) {
            PyBuffer_Release(&dst[held]);
            goto done;
        }
        Py_buffer *a = &dst[held], *b = &src[held];
        /* a snapshot's column (n rows) from a table's (its capacity, n or more) */
        if (a->ndim < 1 || a->ndim > 2 || a->ndim != b->ndim
            || (a->ndim == 2 && a->shape[1] != b->shape[1])) {
            PyBuffer_Release(b);
            dsan_bad_shape(a); /* releases a, TypeError */
            goto done;
        }
        const Py_ssize_t rows_here = a->shape[0] < b->shape[0] ? a->shape[0] : b->shape[0];
        if (n < 0 || rows_here < n)
            n = rows_here;
        size[held] = (a->ndim == 2 ? a->shape[1] : 1) * (is_int ? 4 : 8);
    }
    rows = PySequence_Fast(rowso, "rows: a sequence of ints");
    if (rows == NULL)
        goto done;
    const Py_ssize_t m = PySequence_Fast_GET_SIZE(rows);
    for (Py_ssize_t r = 0; r < m && np_ > 0; r++) { /* every row checked before a write */
        Py_ssize_t j = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(rows, r), PyExc_IndexError);
        if (j == -1 && PyErr_Occurred())
            goto done;
        if (j < 0) {
            /* from the end of arrays of two lengths: numpy's business, the Python twin's */
            PyErr_SetString(PyExc_TypeError, "a negative row");
            goto done;
        }
        if (row_of(j, n) < 0)
            goto done;
    }
    for (Py_ssize_t r = 0; r < m && np_ > 0; r++) {
        Py_ssize_t j = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(rows, r), NULL);
        for (Py_ssize_t k = 0; k < np_; k++)
            memcpy((char *)dst[k].buf + j * size[k], (char *)src[k].buf + j * size[k],
                   size[k]);
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    for (Py_ssize_t k = 0; k < held; k++) {
        PyBuffer_Release(&dst[k]);
        PyBuffer_Release(&src[k]);
    }
    Py_XDECREF(rows);
    Py_DECREF(pairs);
    return ret;
}

static PyMethodDef methods[] = {
    {"charge", charge, METH_VARARGS,
     "charge(cols, i, cpu_milli, mem_mib, num_gpu, gpu_milli) -> (gpus, over): the C twin "
     "of sidecar.rowcharge.charge_py."},
    {"uncharge", uncharge, METH_VARARGS,
     "uncharge(cols, i, cpu_milli, mem_mib, gpu_milli, gpus): the C twin of "
     "sidecar.rowcharge.uncharge_py."},
    {"copy_rows", copy_rows, METH_VARARGS,
     "copy_rows(pairs, rows): the C twin of sidecar.rowcharge.copy_rows_py."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dsan._rowcharge",
    "A pod charged to one node-table row, and rows copied, in C (sidecar.rowcharge).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rowcharge(void) { return PyModule_Create(&module); }
