/* A few class rows recomputed straight from the placement memo, compiled: the C twin of
 * dsan.model.memorows.update_py (read that first; this mirrors it step by step).
 *
 * Why C: a settle recomputes a pod class's one or two changed rows. In Python that is the
 * placement memo's walk (PlacementCache.few: a state key per row, two dict reads, scalar
 * writes into the shape's entry, the entry read back as lists), the row's inputs as Python
 * objects, the node block's fancy-index gather, the first layer and the store: ~45 us of
 * interpreter and numpy per-call cost for arithmetic that takes a few. Here it is one
 * call, reading the snapshot's, the entry's and the memo's values where they lie.
 * Why it stays exact: the memo keys are built with the same values and types as
 * dsan.placementmemo._key_of (dsan/_memowalk.h: the dicts answer as they would to Python),
 * the memo's values and the entry are copied, FGD's exp comes from the same memo (a miss
 * calls the Python function that fills it), and the row is written by dsan/_rowtail.h's
 * write_row, the row writer of dsan._rowkernel (built with -ffp-contract=off); the first
 * layer is
 * dsan/_firstsum.h's ordered float32 sum and the store dsan/_storerows.h's, both shared
 * with dsan._classrows.
 * A memo miss answers False before anything of the class is written (the entry rows
 * already recalled stay written, as in PlacementCache.few): the caller takes the general
 * path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_buffer.h"
#include "_firstsum.h"
#include "_memowalk.h"
#include "_rowtail.h"
#include "_storerows.h"

/* dsan.model.classrows.FEW rows at most, of at most MAX_F features (scratch on the stack) */
#define MAX_ROWS 8
#define MAX_F 256

/* The arrays, in the order of the call's arguments (see rows_py). */
enum {
    /* memo: shape, then these, then tick, before-memo, after-memo */
    E_BEFORE, E_AFTER, E_SLOT, E_FREE, E_AT, EPOCH, BEFORE, BEFORE_AT,
    /* cols */
    C_COUNT, C_CPU_CAP, C_MEM_CAP, C_CPU_USED, C_MEM_USED, C_FREE, C_PODS, C_PRICE, C_MODEL,
    /* feat */
    NODE, ACCESS,
    /* cls: w_abs, then c0, h, then these, then tick, then first */
    W_ABS, BIAS, REQ_TOP, REQ_AGE, AGES, PRE, PRESENT, DEAD, QUANT, ROW_AT, FIRST, N_ARR
};
static const char *FMT[N_ARR] = {"d", "d", "q", "q", "q", "q", "d", "q",
                                 "i", "d", "d", "d", "d", "i", "i", "d", "i",
                                 "f", "?",
                                 "f", "f", "f", "f", "d", "f", "f", "?", "d", "q", "f"};
static const Py_ssize_t SIZE[N_ARR] = {8, 8, 8, 8, 8, 8, 8, 8,
                                       4, 8, 8, 8, 8, 4, 4, 8, 4,
                                       4, 1,
                                       4, 4, 4, 4, 8, 4, 4, 1, 8, 8, 4};
static const int WRITABLE[N_ARR] = {1, 1, 1, 1, 1, 0, 1, 1,
                                    0, 0, 0, 0, 0, 0, 0, 0, 0,
                                    0, 0,
                                    0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
/* arrays of two dimensions; the rest have one */
static int two_dims(int i)
{
    return i == E_FREE || i == C_FREE || i == NODE || i == ACCESS || i == W_ABS || i == PRE
           || i == QUANT || i == FIRST;
}
/* arrays with one entry per node (their first dimension) */
static int per_node(int i)
{
    return i < NODE || i == NODE || i == AGES || i == PRE || i == PRESENT || i == DEAD
           || i == ROW_AT;
}

typedef struct {
    Py_buffer b[N_ARR];
    int held[N_ARR];
} Arrays;

static void release(Arrays *a)
{
    for (int i = 0; i < N_ARR; i++)
        if (a->held[i])
            PyBuffer_Release(&a->b[i]);
}

/* Each array's buffer (None allowed for the pod count, the price and the ages); the
 * shapes that do not depend on the call's sizes checked. 0, or -1 with TypeError set (the
 * caller takes update_py). */
static int take(PyObject **o, Arrays *a)
{
    for (int i = 0; i < N_ARR; i++) {
        if ((i == C_PODS || i == C_PRICE || i == AGES) && o[i] == Py_None)
            continue;
        if (dsan_buffer(o[i], &a->b[i], FMT[i], SIZE[i], WRITABLE[i]) < 0)
            return -1;
        a->held[i] = 1;
    }
    const Py_ssize_t n = a->b[EPOCH].shape[0];
    int ok = 1;
    for (int i = 0; i < N_ARR && ok; i++) {
        if (!a->held[i])
            continue;
        ok = a->b[i].ndim == (two_dims(i) ? 2 : 1) && (!per_node(i) || a->b[i].shape[0] == n)
             && (!(i == E_FREE || i == C_FREE) || a->b[i].shape[1] == MAX_GPUS);
    }
    if (!ok || a->b[ACCESS].shape[1] != n || a->b[QUANT].shape[0] != N_QUANT
        || a->b[QUANT].shape[1] != n) {
        PyErr_SetString(PyExc_TypeError, "arrays of inconsistent shapes");
        return -1;
    }
    return 0;
}

#define ARR(a, i, T) ((T *)(a)->b[i].buf)

/* One row's features into x (width columns) and its quantities into q: rows_py's loop. */
static int features(Arrays *a, Py_ssize_t j, const Common *c, int start, int age0,
                    PyObject *images, long image, PyObject *fgd_memo, PyObject *fgd_of,
                    float *x, Py_ssize_t width, double *q)
{
    const Py_ssize_t n = a->b[EPOCH].shape[0];
    const unsigned char *access = a->b[ACCESS].buf;
    Row in;
    in.before = ARR(a, E_BEFORE, double)[j];
    in.frag_after = ARR(a, E_AFTER, double)[j];
    in.slot = (long)ARR(a, E_SLOT, long long)[j];
    in.nfa = MAX_GPUS;
    for (int g = 0; g < MAX_GPUS; g++)
        in.fafter[g] = (long)ARR(a, E_FREE, long long)[j * MAX_GPUS + g];
    /* min(max(delta / 1000, -50.0), 50.0), as Python's min and max treat a NaN */
    const double arg = py_min(py_max((in.frag_after - in.before) / 1000, -50.0), 50.0);
    if (fgd_score(arg, fgd_memo, fgd_of, &in.fgd) < 0)
        return -1;
    in.image = 0.0;
    if (images != Py_None && image >= 0) {
        PyObject *set = PySequence_GetItem(images, j);
        PyObject *key = set == NULL ? NULL : PyLong_FromLong(image);
        int has = key == NULL ? -1 : PySequence_Contains(set, key);
        Py_XDECREF(set);
        Py_XDECREF(key);
        if (has < 0)
            return -1;
        in.image = has;
    }
    for (int s = 0; s < c->n_shapes; s++)
        in.access[s] = access[s * n + j] != 0;
    in.cnt = ARR(a, C_COUNT, int)[j];
    in.c0 = ARR(a, C_CPU_CAP, double)[j];
    in.c1 = ARR(a, C_MEM_CAP, double)[j];
    in.cpu_used = ARR(a, C_CPU_USED, double)[j];
    in.mem_used = ARR(a, C_MEM_USED, double)[j];
    in.nfree = MAX_GPUS;
    for (int g = 0; g < MAX_GPUS; g++)
        in.free[g] = ARR(a, C_FREE, int)[j * MAX_GPUS + g];
    in.has_pods = a->held[C_PODS];
    in.pods = in.has_pods ? (double)ARR(a, C_PODS, int)[j] : 0.0;
    in.price = a->held[C_PRICE] ? ARR(a, C_PRICE, double)[j] : 1.0;
    /* the node block, its age columns zeroed (they are request columns) */
    memcpy(x, ARR(a, NODE, float) + j * start, (size_t)start * sizeof(float));
    for (Py_ssize_t i = age0; i < start; i++)
        x[i] = 0.0f;
    return write_row(c, &in, x, width, start, q);
}

/* update(rows, memo, cols, feat, cls) -> bool: see dsan.model.memorows.update_py. */
static PyObject *update(PyObject *self, PyObject *args)
{
    PyObject *o[N_ARR] = {NULL}, *rowso, *shape, *mb, *ma, *pvo, *divso, *images, *fgd_memo,
             *fgd_of;
    long long tick, cls_tick;
    long image;
    int nt, n_shapes, start, age0;
    Py_ssize_t c0, h;
    Common c;
    (void)self;
    if (!PyArg_ParseTuple(
            args, "O!(OOOOOOOOOLO!O!)(OOOOOOOOO)(Oi(ddd)OiiiOOOlO!O)(OnnOOOOOOOOOLO)",
            &PyList_Type, &rowso, &shape, &o[E_BEFORE], &o[E_AFTER], &o[E_SLOT], &o[E_FREE],
            &o[E_AT], &o[EPOCH], &o[BEFORE], &o[BEFORE_AT], &tick, &PyDict_Type, &mb,
            &PyDict_Type, &ma, &o[C_COUNT], &o[C_CPU_CAP], &o[C_MEM_CAP], &o[C_CPU_USED],
            &o[C_MEM_USED], &o[C_FREE], &o[C_PODS], &o[C_PRICE], &o[C_MODEL], &pvo, &nt,
            &c.cpu_scale, &c.mem_scale, &c.gpu_scale, &divso, &n_shapes, &start, &age0,
            &o[NODE], &o[ACCESS], &images, &image, &PyDict_Type, &fgd_memo, &fgd_of,
            &o[W_ABS], &c0, &h, &o[BIAS], &o[REQ_TOP], &o[REQ_AGE], &o[AGES], &o[PRE],
            &o[PRESENT], &o[DEAD], &o[QUANT], &o[ROW_AT], &cls_tick, &o[FIRST]))
        return NULL;
    if (parse_common(pvo, nt, divso, n_shapes, &c) < 0)
        return NULL;
    const Py_ssize_t m = PyList_GET_SIZE(rowso);
    if (m > MAX_ROWS) {
        PyErr_SetString(PyExc_ValueError, "more rows than dsan.model.classrows.FEW");
        return NULL;
    }
    Arrays a;
    memset(a.held, 0, sizeof a.held);
    PyObject *ret = NULL;
    if (take(o, &a) < 0)
        goto done;
    const Py_ssize_t n = a.b[EPOCH].shape[0], f = a.b[W_ABS].shape[0];
    const Py_ssize_t k = a.b[W_ABS].shape[1], w = k - h, h2 = a.b[REQ_TOP].shape[0];
    if (f > MAX_F || f < 1 || a.b[FIRST].shape[0] != m || a.b[FIRST].shape[1] != k || h < 0
        || w < 1 || c0 < 0 || c0 > h || a.b[BIAS].shape[0] != w || h2 >= w
        || a.b[REQ_AGE].shape[0] != h2 || a.b[PRE].shape[1] != w) {
        PyErr_SetString(PyExc_TypeError, "the class's arrays of inconsistent shapes");
        goto done;
    }
    if (start < 0 || a.b[NODE].shape[1] != start || age0 < 0 || age0 > start
        || start + nt + 60 + n_shapes > f || a.b[ACCESS].shape[0] < n_shapes) {
        PyErr_SetString(PyExc_ValueError, "w_abs, node_cols or access of another width");
        goto done;
    }
    long long js[MAX_ROWS];
    for (Py_ssize_t r = 0; r < m; r++) { /* every row checked before anything is written */
        Py_ssize_t j = PyLong_AsSsize_t(PyList_GET_ITEM(rowso, r));
        if (j == -1 && PyErr_Occurred())
            goto done;
        if (j < -n || j >= n) {
            PyErr_SetString(PyExc_IndexError, "row out of range");
            goto done;
        }
        js[r] = j < 0 ? j + n : j; /* as numpy's .item(j) reads it */
    }
    /* the walk first, over every row: a miss leaves the class unwritten */
    const Walk walk = {ARR(&a, E_BEFORE, double), ARR(&a, E_AFTER, double),
                       ARR(&a, E_SLOT, long long), ARR(&a, E_FREE, long long),
                       ARR(&a, E_AT, long long), ARR(&a, EPOCH, long long),
                       ARR(&a, BEFORE, double), ARR(&a, BEFORE_AT, long long),
                       ARR(&a, C_CPU_CAP, double), ARR(&a, C_CPU_USED, double),
                       ARR(&a, C_COUNT, int), ARR(&a, C_MODEL, int), ARR(&a, C_FREE, int)};
    for (Py_ssize_t r = 0; r < m; r++) {
        int got = recall(&walk, js[r], shape, tick, mb, ma);
        if (got < 0)
            goto done;
        if (got == 0) {
            ret = Py_False;
            Py_INCREF(ret);
            goto done;
        }
    }
    float x[MAX_ROWS * MAX_F];
    double q[MAX_ROWS * N_QUANT];
    for (Py_ssize_t r = 0; r < m; r++)
        if (features(&a, js[r], &c, start, age0, images, image, fgd_memo, fgd_of, x + r * f, f,
                     q + r * N_QUANT) < 0)
            goto done;
    float *first = a.b[FIRST].buf;
    first_sum(x, m, f, a.b[W_ABS].buf, k, c0, first);
    const Store s = {n, h, w, h2, a.b[BIAS].buf, a.b[REQ_TOP].buf, a.b[REQ_AGE].buf,
                     a.held[AGES] ? a.b[AGES].buf : NULL, a.b[PRE].buf, a.b[PRESENT].buf,
                     a.b[DEAD].buf, a.b[QUANT].buf, a.b[ROW_AT].buf};
    store_rows(&s, first, js, m, q, cls_tick);
    ret = Py_True;
    Py_INCREF(ret);
done:
    release(&a);
    return ret;
}

static PyMethodDef methods[] = {
    {"update", update, METH_VARARGS,
     "update(rows, memo, cols, feat, cls) -> bool: the C twin of dsan.model.memorows.update_py."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dsan._memorows",
    "A few class rows straight from the placement memo (dsan.model.memorows.update_py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__memorows(void) { return PyModule_Create(&module); }
