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
 */
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

/* fill(x, q, pv, nt, scales, divs, n_shapes, start, items): see dsan.rowkernel.fill_py. */
static PyObject *fill(PyObject *self, PyObject *args)
{
    PyObject *xo, *qo, *pvo, *divso, *itemso;
    int nt, n_shapes, start;
    double cpu_scale, mem_scale, gpu_scale;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOi(ddd)OiiO", &xo, &qo, &pvo, &nt, &cpu_scale, &mem_scale,
                          &gpu_scale, &divso, &n_shapes, &start, &itemso))
        return NULL;
    double pv[MAX_POD];
    Py_ssize_t npv = doubles(pvo, pv, MAX_POD, 0, "pod values");
    if (npv < 0)
        return NULL;
    if (nt < 0 || npv != nt + 23) {
        PyErr_SetString(PyExc_ValueError, "pod values: expected task types + 23 entries");
        return NULL;
    }
    /* The workload's shape divisors: CPU, distinct GPU shares, share index, GPU count,
     * CPU-only (dsan.rowfeatures._shape_divisors). */
    PyObject *cpu_div_o, *shares_o, *share_of_o, *ng_div_o, *cpu_only_o;
    if (!PyArg_ParseTuple(divso, "OOOOO", &cpu_div_o, &shares_o, &share_of_o, &ng_div_o,
                          &cpu_only_o))
        return NULL;
    double cpu_div[MAX_SHAPES], cpu_only[MAX_SHAPES];
    long shares[MAX_SHARES], share_of[MAX_SHAPES], ng_div[MAX_SHAPES];
    if (n_shapes < 0 || n_shapes > MAX_SHAPES) {
        PyErr_SetString(PyExc_ValueError, "n_shapes out of range");
        return NULL;
    }
    Py_ssize_t nshare = ints(shares_o, shares, MAX_SHARES, "shares");
    if (nshare < 0 || doubles(cpu_div_o, cpu_div, MAX_SHAPES, 0, "cpu_div") < n_shapes
        || ints(share_of_o, share_of, MAX_SHAPES, "share_of") < n_shapes
        || ints(ng_div_o, ng_div, MAX_SHAPES, "ng_div") < n_shapes
        || doubles(cpu_only_o, cpu_only, MAX_SHAPES, 1, "cpu_only") < n_shapes) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "divisors: fewer entries than n_shapes");
        return NULL;
    }
    for (int i = 0; i < n_shapes; i++) {
        if (share_of[i] < 0 || share_of[i] >= nshare || ng_div[i] < 1 || cpu_div[i] == 0.0) {
            PyErr_SetString(PyExc_ValueError, "divisors out of range");
            return NULL;
        }
    }
    for (Py_ssize_t s = 0; s < nshare; s++) {
        if (shares[s] < 1) {
            PyErr_SetString(PyExc_ValueError, "GPU shares must be positive");
            return NULL;
        }
    }
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
        long cnt, slot;
        double c0, c1, cpu_used, mem_used, price, image, model_ok, before, frag_after, fgd;
        if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != N_ITEM) {
            PyErr_SetString(PyExc_ValueError, "each item: a tuple of 16 entries");
            goto done;
        }
        if (!PyArg_ParseTuple(it, "lddddOOdddddlOdO", &cnt, &c0, &c1, &cpu_used, &mem_used,
                              &free_o, &pods_o, &price, &image, &model_ok, &before,
                              &frag_after, &slot, &fafter_o, &fgd, &access_o))
            goto done;
        long free[MAX_GPUS], fafter[MAX_GPUS];
        double access[MAX_SHAPES];
        Py_ssize_t nfree = ints(free_o, free, MAX_GPUS, "free");
        Py_ssize_t nfa = ints(fafter_o, fafter, MAX_GPUS, "free_after");
        Py_ssize_t nacc = doubles(access_o, access, MAX_SHAPES, 1, "access");
        if (nfree < 0 || nfa < 0 || nacc < 0)
            goto done;
        if (nfree == 0 || nacc != n_shapes) {
            PyErr_SetString(PyExc_ValueError, "free: no slots, or access of the wrong size");
            goto done;
        }
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
        const double n0 = c0 - cpu_used, n1 = c1 - mem_used, n2 = gfree;
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
            goto done;
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
        v[o++] = image;
        v[o++] = pods_o == Py_None ? 0.0 : PyFloat_AsDouble(pods_o) / 64;
        if (PyErr_Occurred())
            goto done;
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
        (void)model_ok; /* its column is shape1_room_gpu_bound now */
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
        for (Py_ssize_t s = 0; s < nshare; s++) {
            per_share[s] = 0;
            for (Py_ssize_t i = 0; i < nfa; i++)
                if (fafter[i] > 0)
                    per_share[s] += fafter[i] / shares[s];
        }
        for (int i = 0; i < n_shapes; i++) {
            const double by_cpu = py_floordiv(ca / cpu_div[i], 1.0);
            const long gpus = per_share[share_of[i]] / ng_div[i];
            double copies;
            if (cpu_only[i] != 0.0)
                copies = by_cpu;
            else if ((double)gpus < by_cpu) /* min(by_cpu, gpus) is the int */
                copies = (double)(access[i] != 0.0 ? gpus : 0);
            else
                copies = by_cpu * access[i];
            v[o++] = py_min(copies / 8, 1.0);
        }
        /* shape1_room_gpu_bound: shape 1's room times the factor, as fill_py multiplies */
        v[room_at] = n_shapes > 1 ? v[shape_at + 1] * room : 0.0;
        float *dst = (float *)xb.buf + r * width;
        if (o != tail) {
            PyErr_SetString(PyExc_ValueError, "layout mismatch");
            goto done;
        }
        for (Py_ssize_t i = 0; i < o; i++)
            dst[start + i] = (float)v[i];
        for (Py_ssize_t i = start + o; i < width; i++)
            dst[i] = 0.0f; /* the shape columns past the workload's shapes */
        double *qr = (double *)qb.buf + r * N_QUANT;
        qr[0] = delta;
        qr[1] = bestfit;
        qr[2] = least;
        qr[3] = dot;
        qr[4] = cost;
        qr[5] = fgd_int;
        qr[6] = bestfit;
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    PyBuffer_Release(&xb);
    PyBuffer_Release(&qb);
    Py_DECREF(items);
    return ret;
}

static PyMethodDef methods[] = {
    {"fill", fill, METH_VARARGS,
     "fill(x, q, pv, nt, scales, divs, n_shapes, start, items): the C twin of "
     "dsan.rowkernel.fill_py."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dsan._rowkernel", "The few-row featurizer's per-row tail in C.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rowkernel(void) { return PyModule_Create(&module); }
