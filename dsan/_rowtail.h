/* The row writer of dsan/_rowkernel.c (fill_py's loop body as C, expression by expression):
 * Python's min / max / // with their NaN and signed-zero behaviour, the list readers, the
 * call-wide values (the pod's, the workload's shape divisors) and one row's tail and
 * quantities (write_row). Included by that file only; see it for why the bits match.
 */
#ifndef DSAN_ROWTAIL_H
#define DSAN_ROWTAIL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <limits.h>
#include <string.h>

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
    if (nt < 0 || npv != nt + 24) {
        PyErr_SetString(PyExc_ValueError, "pod values: expected task types + 24 entries");
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
    const double cpu_bound = pv[nt + 23]; /* dsan.clusterwide.cpu_bound_factor */
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
    /* cpu_bound_cpu_per_gpu: node_cpu_per_gpu times the factor, as featurize multiplies */
    v[nt + 11] = (cnt > 0 ? c0 / (double)cnt : 0.0) / cpu_scale * cpu_bound;
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
static inline int row_lists(PyObject *fafter_o, PyObject *access_o, int n_shapes, Row *in)
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

#endif
