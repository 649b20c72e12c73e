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
 * same write_row as fill.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <limits.h>
#include <string.h>

#include "_buffer.h"

#define MAX_GPUS 8
#define N_QUANT 7
#define N_ITEM 16

/* Python's max(a, b) on floats: a unless b > a (so a NaN first argument stays). */
static double py_max(double a, double b) { return b > a ? b : a; }
/* Python's min(a, b): a unless b < a. */
static double py_min(double a, double b) { return b < a ? b : a; }

/* CPython's float floor division (Objects/floatobject.c, _float_div_mod); wx != 0. */
static double py_floordiv(double vx, double wx)
{
    double mod = fmod(vx, wx);
    double div = (vx - mod) / wx;
    double fl;
    if (mod) {
        if ((wx < 0) != (mod < 0))
            div -= 1.0;
    }
    if (div) {
        fl = floor(div);
        if (div - fl > 0.5)
            fl += 1.0;
    }
    else {
        fl = copysign(0.0, vx / wx);
    }
    return fl;
}

/* A list or tuple of up to cap ints into out; its length, or -1 with an exception set. */
static Py_ssize_t ints(PyObject *seq, long *out, Py_ssize_t cap, const char *what)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > cap) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: more than %zd entries", what, cap);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return n;
}

/* A list of floats (or of truth values, as 0/1 when truth is set) into out. */
static Py_ssize_t doubles(PyObject *seq, double *out, Py_ssize_t cap, int truth,
                          const char *what)
{
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > cap) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: more than %zd entries", what, cap);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        if (truth) {
            int t = PyObject_IsTrue(o);
            if (t < 0) {
                Py_DECREF(fast);
                return -1;
            }
            out[i] = t;
        }
        else {
            out[i] = PyFloat_AsDouble(o);
            if (out[i] == -1.0 && PyErr_Occurred()) {
                Py_DECREF(fast);
                return -1;
            }
        }
    }
    Py_DECREF(fast);
    return n;
}

#define MAX_POD 64
#define MAX_SHAPES 64
#define MAX_SHARES 64

/* What every row of one call shares: the pod's values and the workload's shape divisors. */
typedef struct {
    double pv[MAX_POD];
    int nt, n_shapes;
    double cpu_scale, mem_scale, gpu_scale;
    double cpu_div[MAX_SHAPES], cpu_only[MAX_SHAPES];
    long shares[MAX_SHARES], share_of[MAX_SHAPES], ng_div[MAX_SHAPES];
    Py_ssize_t nshare;
} Common;

/* One row's inputs: fill_py's item, as C values. */
typedef struct {
    long cnt, slot;
    double c0, c1, cpu_used, mem_used, price, image, before, frag_after, fgd;
    int has_pods;
    double pods;
    long free[MAX_GPUS], fafter[MAX_GPUS];
    Py_ssize_t nfree, nfa;
    double access[MAX_SHAPES];
} Row;

/* The pod values and the divisors (dsan.rowfeatures._shape_divisors: CPU, distinct GPU
 * shares, share index, GPU count, CPU-only) into c; 0, or -1 with an exception set. */
static int parse_common(PyObject *pvo, int nt, PyObject *divso, int n_shapes, Common *c)
{
    Py_ssize_t npv = doubles(pvo, c->pv, MAX_POD, 0, "pod values");
    if (npv < 0)
        return -1;
    if (nt < 0 || npv != nt + 23) {
        PyErr_SetString(PyExc_ValueError, "pod values: expected task types + 23 entries");
        return -1;
    }
    c->nt = nt;
    c->n_shapes = n_shapes;
    PyObject *cpu_div_o, *shares_o, *share_of_o, *ng_div_o, *cpu_only_o;
    if (!PyArg_ParseTuple(divso, "OOOOO", &cpu_div_o, &shares_o, &share_of_o, &ng_div_o,
                          &cpu_only_o))
        return -1;
    if (n_shapes < 0 || n_shapes > MAX_SHAPES) {
        PyErr_SetString(PyExc_ValueError, "n_shapes out of range");
        return -1;
    }
    c->nshare = ints(shares_o, c->shares, MAX_SHARES, "shares");
    if (c->nshare < 0 || doubles(cpu_div_o, c->cpu_div, MAX_SHAPES, 0, "cpu_div") < n_shapes
        || ints(share_of_o, c->share_of, MAX_SHAPES, "share_of") < n_shapes
        || ints(ng_div_o, c->ng_div, MAX_SHAPES, "ng_div") < n_shapes
        || doubles(cpu_only_o, c->cpu_only, MAX_SHAPES, 1, "cpu_only") < n_shapes) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "divisors: fewer entries than n_shapes");
        return -1;
    }
    for (int i = 0; i < n_shapes; i++) {
        if (c->share_of[i] < 0 || c->share_of[i] >= c->nshare || c->ng_div[i] < 1
            || c->cpu_div[i] == 0.0) {
            PyErr_SetString(PyExc_ValueError, "divisors out of range");
            return -1;
        }
    }
    for (Py_ssize_t s = 0; s < c->nshare; s++) {
        if (c->shares[s] < 1) {
            PyErr_SetString(PyExc_ValueError, "GPU shares must be positive");
            return -1;
        }
    }
    return 0;
}

/* One row's tail into dst[start:width] and its quantities into qr: fill_py's loop body.
 * 0, or -1 with an exception set. */
static int write_row(const Common *c, const Row *in, float *dst, Py_ssize_t width,
                     Py_ssize_t start, double *qr)
{
    const int nt = c->nt, n_shapes = c->n_shapes;
    const double *pv = c->pv;
    const double cpu_scale = c->cpu_scale, mem_scale = c->mem_scale, gpu_scale = c->gpu_scale;
    const long cnt = in->cnt, slot = in->slot;
    const long *free = in->free, *fafter = in->fafter;
    const Py_ssize_t nfree = in->nfree, nfa = in->nfa;
    const double c0 = in->c0, c1 = in->c1, cpu_used = in->cpu_used;
    const double price = in->price, before = in->before, frag_after = in->frag_after;
    const double fgd = in->fgd;
    const Py_ssize_t tail = nt + 20 + 40 + n_shapes;
    const double rc = pv[nt + 15], rm = pv[nt + 16], rg = pv[nt + 17], k = pv[nt + 18];
    const double gm_used = pv[nt + 19], gm_min = pv[nt + 20], sharing = pv[nt + 21];
    const double room = pv[nt + 22]; /* dsan.clusterwide.room_factor */
    const double rq0 = rc / cpu_scale, rq1 = rm / mem_scale, rq2 = rg / gpu_scale;
    /* free[:cnt] and free_after[:cnt] as Python slices them */
    Py_ssize_t nlive = cnt < 0 ? (nfree + cnt > 0 ? nfree + cnt : 0)
                               : (cnt < nfree ? cnt : nfree);
    Py_ssize_t nlive_a = cnt < 0 ? (nfa + cnt > 0 ? nfa + cnt : 0) : (cnt < nfa ? cnt : nfa);
    const double c2 = (double)cnt * 1000.0;
    long gsum = 0, gmax = free[0];
    for (Py_ssize_t i = 0; i < nfree; i++) {
        gsum += free[i];
        if (free[i] > gmax)
            gmax = free[i];
    }
    const double gfree = (double)gsum;
    const double n0 = c0 - cpu_used, n1 = c1 - in->mem_used, n2 = gfree;
    const double a0 = n0 - rc, a1 = n1 - rm, a2 = n2 - rg;
    const double of0 = c0 > 0 ? rc / c0 : 0.0, of1 = c1 > 0 ? rm / c1 : 0.0;
    const double of2 = c2 > 0 ? rg / c2 : 0.0;
    const double fn0 = c0 > 0 ? n0 / c0 : 0.0, fn1 = c1 > 0 ? n1 / c1 : 0.0;
    const double fn2 = c2 > 0 ? n2 / c2 : 0.0;
    const double fa0 = c0 > 0 ? a0 / c0 : 0.0, fa1 = c1 > 0 ? a1 / c1 : 0.0;
    const double fa2 = c2 > 0 ? a2 / c2 : 0.0;
    const double cu = 1 - fa0, mu = 1 - fa1;
    const double least = 0.5 * (fa0 + fa1);
    const double dot = rq0 * cu + rq1 * mu + rq2 * (1 - fa2);
    const double cl = a0 / cpu_scale, gl = a2 / gpu_scale;
    const double bestfit = 1 - (0.5 * cl + 0.5 * gl);
    const double delta = frag_after - before;
    /* math.floor gives an int, which has no -0.0: + 0.0 turns floor(-0.0) into 0.0 */
    const double fgd_int = (floor(fgd * 100) + 0.0) / 100;
    if (slot >= nfree) {
        PyErr_SetString(PyExc_IndexError, "slot out of range");
        return -1;
    }
    const double shared = slot >= 0 ? (double)free[slot] : 0.0;
    const double chosen = sharing > 0 ? shared : (k > 0 ? 1000.0 : 0.0);
    long full = 0, partial = 0, fitting_n = 0, full_after = 0;
    /* min(live + [1000] * (MAX_GPUS - len(live))) */
    long lmin = nlive < MAX_GPUS ? 1000 : LONG_MAX;
    for (Py_ssize_t i = 0; i < nlive; i++) {
        full += free[i] == 1000;
        partial += free[i] > 0 && free[i] < 1000;
        fitting_n += (double)free[i] >= gm_min;
        if (free[i] < lmin)
            lmin = free[i];
    }
    for (Py_ssize_t i = 0; i < nlive_a; i++)
        full_after += fafter[i] == 1000;
    const double fitting = (double)fitting_n;
    const double cost = price * py_max(of0, of2);
    double v[128];
    Py_ssize_t o = 0;
    for (int i = 0; i < nt + 13; i++)
        v[o++] = pv[i];
    v[o++] = in->image;
    v[o++] = in->has_pods ? in->pods / 64 : 0.0;
    v[o++] = of0;
    v[o++] = of1;
    v[o++] = of2;
    v[o++] = pv[nt + 13];
    v[o++] = pv[nt + 14];
    v[o++] = fn0;
    v[o++] = fa0;
    v[o++] = fn1;
    v[o++] = fa1;
    v[o++] = fn2;
    v[o++] = fa2;
    v[o++] = least;
    v[o++] = 1 - fabs(cu - mu) / 2;
    v[o++] = rq0 * n0 / cpu_scale + rq1 * n1 / mem_scale + rq2 * gfree / gpu_scale;
    v[o++] = dot;
    v[o++] = cl;
    v[o++] = gl;
    v[o++] = bestfit;
    v[o++] = before / gpu_scale;
    v[o++] = frag_after / gpu_scale;
    v[o++] = delta / 1000;
    v[o++] = fgd;
    v[o++] = fgd_int;
    v[o++] = (double)full / 8;
    v[o++] = (double)full_after / 8;
    v[o++] = (double)partial / 8;
    v[o++] = chosen / 1000;
    v[o++] = py_max(chosen - gm_used, 0.0) / 1000;
    v[o++] = (double)gmax / 1000;
    v[o++] = (double)(cnt > 0 ? lmin : 0) / 1000;
    v[o++] = fitting / 8;
    v[o++] = (fitting - k) / 8;
    v[o++] = sharing > 0 && 0 < chosen && chosen < 1000;
    v[o++] = cpu_used == 0 && gfree == c2;
    v[o++] = 0 < gfree && gfree < c2;
    const Py_ssize_t room_at = o++; /* written once shape 1's room is known */
    for (int i = 0; i < 6; i++)
        v[o++] = 0.0;
    v[o++] = gfree > 0 ? before / gfree : 0.0;
    v[o++] = cost / 4;
    v[o++] = 0.0;
    /* shape{k}_hostable_after (dsan.rowfeatures._hostable) */
    const Py_ssize_t shape_at = o;
    const double ca = py_max(a0, 0.0);
    long per_share[MAX_SHARES];
    for (Py_ssize_t s = 0; s < c->nshare; s++) {
        per_share[s] = 0;
        for (Py_ssize_t i = 0; i < nfa; i++)
            if (fafter[i] > 0)
                per_share[s] += fafter[i] / c->shares[s];
    }
    for (int i = 0; i < n_shapes; i++) {
        const double by_cpu = py_floordiv(ca / c->cpu_div[i], 1.0);
        const long gpus = per_share[c->share_of[i]] / c->ng_div[i];
        double copies;
        if (c->cpu_only[i] != 0.0)
            copies = by_cpu;
        else if ((double)gpus < by_cpu) /* min(by_cpu, gpus) is the int */
            copies = (double)(in->access[i] != 0.0 ? gpus : 0);
        else
            copies = by_cpu * in->access[i];
        v[o++] = py_min(copies / 8, 1.0);
    }
    /* shape1_room_gpu_bound: shape 1's room times the factor, as fill_py multiplies */
    v[room_at] = n_shapes > 1 ? v[shape_at + 1] * room : 0.0;
    if (o != tail) {
        PyErr_SetString(PyExc_ValueError, "layout mismatch");
        return -1;
    }
    for (Py_ssize_t i = 0; i < o; i++)
        dst[start + i] = (float)v[i];
    for (Py_ssize_t i = start + o; i < width; i++)
        dst[i] = 0.0f; /* the shape columns past the workload's shapes */
    qr[0] = delta;
    qr[1] = bestfit;
    qr[2] = least;
    qr[3] = dot;
    qr[4] = cost;
    qr[5] = fgd_int;
    qr[6] = bestfit;
    return 0;
}

/* A row's free_after and access lists into in; 0, or -1 with an exception set. */
static int row_lists(PyObject *fafter_o, PyObject *access_o, int n_shapes, Row *in)
{
    in->nfa = ints(fafter_o, in->fafter, MAX_GPUS, "free_after");
    if (in->nfa < 0)
        return -1;
    Py_ssize_t nacc = doubles(access_o, in->access, MAX_SHAPES, 1, "access");
    if (nacc < 0)
        return -1;
    if (nacc != n_shapes) {
        PyErr_SetString(PyExc_ValueError, "access of the wrong size");
        return -1;
    }
    return 0;
}

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
