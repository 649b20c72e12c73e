/* The head cache's passes over a request's candidates, compiled: the C twins of the numpy
 * functions in dsan/model/headscan.py (read that first).
 *
 * Why C: a DSAN reply looks each candidate up in its pod class's cache: is its row stale,
 * the candidates' per-quantity extremes, has its logit been computed under them. In numpy
 * that is ~15 calls of gathers, compares and reductions over the m candidates (~30 us at
 * 1,000 nodes, ~90 us at 5,000); here it is three loops.
 * Why it stays exact: only gathers, comparisons and min / max, which have one answer in
 * any order, except for a NaN among the values or a zero extreme (numpy then decides which
 * NaN or which signed zero): extremes() returns False there and the caller asks numpy.
 */
#include "_buffer.h"
#include <math.h>
#include <string.h>

/* A C-contiguous 1-d (with rows > 0 a (rows, n), with rows < 0 any 2-d) buffer of the
 * given struct format and item size; TypeError otherwise (the caller then takes the numpy
 * twin). */
static int get(PyObject *o, Py_buffer *b, const char *fmt, Py_ssize_t size, int writable,
               Py_ssize_t rows)
{
    if (dsan_buffer(o, b, fmt, size, writable) < 0)
        return -1;
    int ok = rows > 0   ? b->ndim == 2 && b->shape[0] == rows
             : rows < 0 ? b->ndim == 2
                        : b->ndim == 1;
    return ok ? 0 : dsan_bad_shape(b);
}

static Py_ssize_t length(const Py_buffer *b) { return b->ndim == 2 ? b->shape[1] : b->shape[0]; }

/* nodes[k] as a row of an n-row array, negatives wrapped as numpy does; -1 if out of range
 * (IndexError set). */
static Py_ssize_t row(const long long *nodes, Py_ssize_t k, Py_ssize_t n)
{
    long long r = nodes[k];
    if (r < 0)
        r += n;
    if (r < 0 || r >= n) {
        PyErr_Format(PyExc_IndexError, "index %lld is out of bounds for size %zd", nodes[k], n);
        return -1;
    }
    return (Py_ssize_t)r;
}

/* stale(nodes, at, epoch, out) -> count: out[:count] = the nodes whose at < epoch, in order
 * (numpy: nodes[at[nodes] < epoch[nodes]]). */
static PyObject *stale(PyObject *self, PyObject *args)
{
    PyObject *no, *ao, *eo, *oo;
    Py_buffer nb, ab, eb, ob;
    PyObject *ret = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOO", &no, &ao, &eo, &oo))
        return NULL;
    if (get(no, &nb, "q", 8, 0, 0) < 0)
        return NULL;
    if (get(ao, &ab, "q", 8, 0, 0) < 0)
        goto e1;
    if (get(eo, &eb, "q", 8, 0, 0) < 0)
        goto e2;
    if (get(oo, &ob, "q", 8, 1, 0) < 0)
        goto e3;
    const Py_ssize_t m = nb.shape[0], n = ab.shape[0];
    if (eb.shape[0] != n || ob.shape[0] < m) {
        PyErr_SetString(PyExc_TypeError, "at and epoch of one length, out as long as nodes");
        goto e4;
    }
    const long long *nodes = nb.buf, *at = ab.buf, *ep = eb.buf;
    long long *out = ob.buf;
    Py_ssize_t c = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        Py_ssize_t r = row(nodes, k, n);
        if (r < 0)
            goto e4;
        if (at[r] < ep[r])
            out[c++] = nodes[k];
    }
    ret = PyLong_FromSsize_t(c);
e4:
    PyBuffer_Release(&ob);
e3:
    PyBuffer_Release(&eb);
e2:
    PyBuffer_Release(&ab);
e1:
    PyBuffer_Release(&nb);
    return ret;
}

/* extremes(quant, nodes, lo, hi) -> bool: lo[j] = min over nodes of quant[j] (j < 5), hi[j]
 * = max (j < 7), as numpy's q[:5].min(1) and q.max(1) of q = quant[:, nodes]; False (lo
 * and hi unspecified) when there is no node, a NaN among the values, or a zero extreme. */
static PyObject *extremes(PyObject *self, PyObject *args)
{
    PyObject *qo, *no, *lo_o, *hi_o;
    Py_buffer qb, nb, lb, hb;
    PyObject *ret = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOO", &qo, &no, &lo_o, &hi_o))
        return NULL;
    if (get(qo, &qb, "d", 8, 0, 7) < 0)
        return NULL;
    if (get(no, &nb, "q", 8, 0, 0) < 0)
        goto e1;
    if (get(lo_o, &lb, "d", 8, 1, 5) < 0)
        goto e2;
    if (get(hi_o, &hb, "d", 8, 1, 7) < 0)
        goto e3;
    const Py_ssize_t m = nb.shape[0], n = length(&qb);
    if (lb.shape[1] != 1 || hb.shape[1] != 1) {
        PyErr_SetString(PyExc_TypeError, "lo (5, 1) and hi (7, 1) expected");
        goto e4;
    }
    const double *q = qb.buf;
    const long long *nodes = nb.buf;
    double lo[5], hi[7];
    int nan = 0;
    for (Py_ssize_t k = 0; k < m; k++) /* every index first: the passes below trust them */
        if (row(nodes, k, n) < 0)
            goto e4;
    /* One quantity at a time, as numpy does: gather its row into a contiguous buffer, then
     * reduce it with four independent minima and maxima per step (a single chain waits on
     * each compare's latency). min and max do not depend on the order (zeros and NaN
     * aside, which are left to numpy below). */
    double small[512];
    double *tmp = m <= 512 ? small : PyMem_Malloc(m * sizeof(double));
    if (tmp == NULL) {
        PyErr_NoMemory();
        goto e4;
    }
    for (int j = 0; j < 7; j++) {
        const double *qj = q + j * n;
        for (Py_ssize_t k = 0; k < m; k++) {
            const long long r = nodes[k];
            tmp[k] = qj[r < 0 ? r + n : r];
        }
        double mn0 = INFINITY, mn1 = INFINITY, mn2 = INFINITY, mn3 = INFINITY;
        double mx0 = -INFINITY, mx1 = -INFINITY, mx2 = -INFINITY, mx3 = -INFINITY;
        int bad = 0;
        Py_ssize_t k = 0;
        for (; k + 4 <= m; k += 4) {
            const double a = tmp[k], b = tmp[k + 1], c = tmp[k + 2], d = tmp[k + 3];
            bad |= (a != a) | (b != b) | (c != c) | (d != d);
            mn0 = a < mn0 ? a : mn0;
            mn1 = b < mn1 ? b : mn1;
            mn2 = c < mn2 ? c : mn2;
            mn3 = d < mn3 ? d : mn3;
            mx0 = a > mx0 ? a : mx0;
            mx1 = b > mx1 ? b : mx1;
            mx2 = c > mx2 ? c : mx2;
            mx3 = d > mx3 ? d : mx3;
        }
        for (; k < m; k++) {
            const double a = tmp[k];
            bad |= a != a;
            mn0 = a < mn0 ? a : mn0;
            mx0 = a > mx0 ? a : mx0;
        }
        mn0 = mn1 < mn0 ? mn1 : mn0;
        mn2 = mn3 < mn2 ? mn3 : mn2;
        mx0 = mx1 > mx0 ? mx1 : mx0;
        mx2 = mx3 > mx2 ? mx3 : mx2;
        nan |= bad;
        if (j < 5)
            lo[j] = mn2 < mn0 ? mn2 : mn0;
        hi[j] = mx2 > mx0 ? mx2 : mx0;
    }
    if (tmp != small)
        PyMem_Free(tmp);
    int ok = m > 0 && !nan;
    for (int j = 0; j < 7 && ok; j++)
        ok = hi[j] != 0.0 && (j >= 5 || lo[j] != 0.0);
    if (ok) {
        memcpy(lb.buf, lo, sizeof lo);
        memcpy(hb.buf, hi, sizeof hi);
    }
    ret = PyBool_FromLong(ok);
e4:
    PyBuffer_Release(&hb);
e3:
    PyBuffer_Release(&lb);
e2:
    PyBuffer_Release(&nb);
e1:
    PyBuffer_Release(&qb);
    return ret;
}

/* lookup(nodes, at, e_at, e_age, ages, e_logit, out, todo) -> count: out[k] =
 * e_logit[nodes[k]] for every k, todo[:count] = the k where e_at != at or e_age != the
 * node's age (ages[node], inf when ages is None; NaN never equals), in order. */
static PyObject *lookup(PyObject *self, PyObject *args)
{
    PyObject *no, *ao, *eao, *ego, *ago, *elo, *oo, *to;
    Py_buffer nb, ab, eab, egb, agb, elb, ob, tb;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &no, &ao, &eao, &ego, &ago, &elo, &oo, &to))
        return NULL;
    const int has_ages = ago != Py_None;
    PyObject *ret = NULL;
    if (get(no, &nb, "q", 8, 0, 0) < 0)
        return NULL;
    if (get(ao, &ab, "q", 8, 0, 0) < 0)
        goto e1;
    if (get(eao, &eab, "q", 8, 0, 0) < 0)
        goto e2;
    if (get(ego, &egb, "d", 8, 0, 0) < 0)
        goto e3;
    if (has_ages && get(ago, &agb, "d", 8, 0, 0) < 0)
        goto e4;
    if (get(elo, &elb, "d", 8, 0, 0) < 0)
        goto e5;
    if (get(oo, &ob, "d", 8, 1, 0) < 0)
        goto e6;
    if (get(to, &tb, "q", 8, 1, 0) < 0)
        goto e7;
    const Py_ssize_t m = nb.shape[0], n = ab.shape[0];
    if (eab.shape[0] != n || egb.shape[0] != n || elb.shape[0] != n
        || (has_ages && agb.shape[0] != n) || ob.shape[0] < m || tb.shape[0] < m) {
        PyErr_SetString(PyExc_TypeError, "per-node arrays of one length, outputs of m");
        goto e8;
    }
    const long long *nodes = nb.buf, *at = ab.buf, *e_at = eab.buf;
    const double *e_age = egb.buf, *ages = has_ages ? agb.buf : NULL, *e_logit = elb.buf;
    double *out = ob.buf;
    long long *todo = tb.buf;
    Py_ssize_t c = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        Py_ssize_t r = row(nodes, k, n);
        if (r < 0)
            goto e8;
        const double age = has_ages ? ages[r] : INFINITY;
        if (e_at[r] != at[r] || e_age[r] != age)
            todo[c++] = k;
        out[k] = e_logit[r];
    }
    ret = PyLong_FromSsize_t(c);
e8:
    PyBuffer_Release(&tb);
e7:
    PyBuffer_Release(&ob);
e6:
    PyBuffer_Release(&elb);
e5:
    if (has_ages)
        PyBuffer_Release(&agb);
e4:
    PyBuffer_Release(&egb);
e3:
    PyBuffer_Release(&eab);
e2:
    PyBuffer_Release(&ab);
e1:
    PyBuffer_Release(&nb);
    return ret;
}

/* request_rows(q, lo, hi, hib, tel_age, ages, tel, present, dead, nodes, xr, dead_out):
 * the head's 9 request columns of m rows (any m: the many-row head takes it too when built)
 * into xr (m, 9) float32 and which rows are dead into dead_out (m,): see
 * dsan.model.headscan.request_rows_py. */
static PyObject *request_rows(PyObject *self, PyObject *args)
{
    PyObject *o[11];
    int tel;
    Py_buffer qb, lb, hb, bb, tb, ab, pb, db, nb, xb, ob;
    PyObject *ret = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOpOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &tel, &o[6], &o[7], &o[8], &o[9], &o[10]))
        return NULL;
    if (get(o[0], &qb, "d", 8, 0, 7) < 0)
        return NULL;
    if (get(o[1], &lb, "d", 8, 0, 5) < 0)
        goto r1;
    if (get(o[2], &hb, "d", 8, 0, 7) < 0)
        goto r2;
    if (get(o[3], &bb, "?", 1, 0, 0) < 0)
        goto r3;
    if (get(o[4], &tb, "d", 8, 0, 0) < 0)
        goto r4;
    if (get(o[5], &ab, "d", 8, 0, 0) < 0)
        goto r5;
    if (get(o[6], &pb, "f", 4, 0, 0) < 0)
        goto r6;
    if (get(o[7], &db, "?", 1, 0, 0) < 0)
        goto r7;
    if (get(o[8], &nb, "q", 8, 0, 0) < 0)
        goto r8;
    if (get(o[9], &xb, "f", 4, 1, -1) < 0)
        goto r9;
    if (get(o[10], &ob, "?", 1, 1, 0) < 0)
        goto r10;
    const Py_ssize_t m = nb.shape[0], n = pb.shape[0];
    if (length(&qb) != m || lb.shape[1] != 1 || hb.shape[1] != 1 || bb.shape[0] != 5
        || tb.shape[0] != m || ab.shape[0] != m || db.shape[0] != n || xb.shape[0] != m
        || xb.shape[1] != 9 || ob.shape[0] != m) {
        PyErr_SetString(PyExc_TypeError, "arrays of inconsistent shapes");
        goto r11;
    }
    const double *q = qb.buf, *lo = lb.buf, *hi = hb.buf, *tel_age = tb.buf, *ages = ab.buf;
    const char *hib = bb.buf, *dead_in = db.buf;
    const float *present = pb.buf;
    const long long *nodes = nb.buf;
    float *xr = xb.buf;
    char *dead = ob.buf;
    for (Py_ssize_t k = 0; k < m; k++)
        if (row(nodes, k, n) < 0)
            goto r11;
    int bounded = 1;
    for (Py_ssize_t k = 0; k < m; k++) {
        double v[9];
        for (int j = 0; j < 5; j++) {
            const double lj = lo[j], hj = hi[j], x = q[j * m + k];
            v[j < 4 ? j : 6] = hj > lj ? (hib[j] ? x - lj : hj - x) / (hj - lj) : 1.0;
        }
        v[4] = q[5 * m + k] >= hi[5];
        v[5] = q[6 * m + k] >= hi[6] - 1e-9;
        const double t = tel_age[k];
        v[7] = t > 1.0 ? 1.0 : t;
        v[8] = tel && isfinite(ages[k]);
        for (int j = 0; j < 9; j++) {
            const float f = (float)v[j];
            xr[k * 9 + j] = f;
            bounded &= f >= 0.0f && f <= 1.0f; /* NaN: not bounded */
        }
    }
    /* dead as cached, with the row's telemetry presence unchanged, when every request
     * column lies in [0, 1] */
    for (Py_ssize_t k = 0; k < m; k++) {
        const Py_ssize_t r = row(nodes, k, n); /* in range: checked above */
        dead[k] = bounded && dead_in[r] && xr[k * 9 + 8] == present[r];
    }
    ret = Py_None;
    Py_INCREF(ret);
r11:
    PyBuffer_Release(&ob);
r10:
    PyBuffer_Release(&xb);
r9:
    PyBuffer_Release(&nb);
r8:
    PyBuffer_Release(&db);
r7:
    PyBuffer_Release(&pb);
r6:
    PyBuffer_Release(&ab);
r5:
    PyBuffer_Release(&tb);
r4:
    PyBuffer_Release(&bb);
r3:
    PyBuffer_Release(&hb);
r2:
    PyBuffer_Release(&lb);
r1:
    PyBuffer_Release(&qb);
    return ret;
}

/* few_head(xr, dead, nodes, req_w, pre, w1g, b1, w2, dead_out, out, att, gq, u1, ud): the
 * few-row head's MLP on m rows into out (m,) float32, before the linear term and the last
 * bias: see dsan.model.headscan.few_head_py. att, gq, u1 and ud are None for a head whose MLP
 * ignores z. float32 throughout, as numpy computes it; the sums run in another order than
 * BLAS's, so live rows may differ from numpy in float32 rounding. Dead rows without z get
 * dead_out itself (exact); with z, rows the caller found dead must not be passed (the caller
 * takes numpy there, whose exp and sums the many-row head shares). */
/* Vectorised (O3): the hot loops run across the 2H outputs, each summed in the same order
 * as without, so vectorising changes no bits. */
__attribute__((optimize("O3"))) static PyObject *few_head(PyObject *self, PyObject *args)
{
    PyObject *o[13];
    float dead_out;
    Py_buffer b[13];
    int held = 0;
    PyObject *ret = NULL;
    float *work = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOOOfOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &dead_out, &o[8], &o[9], &o[10], &o[11], &o[12]))
        return NULL;
    const int uses_z = o[9] != Py_None;
    /* format, item size, writable, rows (see get) of xr dead nodes req_w pre w1g b1 w2 out
     * att gq u1 ud */
    static const char *fmt[13] = {"f", "?", "q", "f", "f", "f", "f", "f", "f", "f", "f", "f",
                                  "f"};
    static const Py_ssize_t size[13] = {4, 1, 8, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4};
    static const int wr[13] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0};
    static const Py_ssize_t rows[13] = {-1, 0, 0, 9, -1, -1, 0, 0, 0, 0, -1, -1, -1};
    const int count = uses_z ? 13 : 9;
    for (; held < count; held++)
        if (get(o[held], &b[held], fmt[held], size[held], wr[held], rows[held]) < 0)
            goto done;
    const Py_ssize_t m = b[2].shape[0], n = b[4].shape[0], h2 = b[6].shape[0];
    const Py_ssize_t wd = b[3].shape[1];
    int ok = b[0].shape[0] == m && b[0].shape[1] == 9 && b[1].shape[0] == m && wd == h2 + 1
             && b[4].shape[1] == wd && b[5].shape[0] == h2 && b[5].shape[1] == h2
             && b[7].shape[0] == h2 && b[8].shape[0] == m;
    if (uses_z)
        ok = ok && b[9].shape[0] == n && b[10].shape[0] == n && b[10].shape[1] == 9
             && b[11].shape[0] == n && b[11].shape[1] == h2 && b[12].shape[0] == n
             && b[12].shape[1] == h2;
    if (!ok) {
        PyErr_SetString(PyExc_TypeError, "arrays of inconsistent shapes");
        goto done;
    }
    const float *xr = b[0].buf, *req_w = b[3].buf, *pre = b[4].buf, *w1g = b[5].buf,
                *b1 = b[6].buf, *w2 = b[7].buf;
    const char *dead = b[1].buf;
    const long long *nodes = b[2].buf;
    float *out = b[8].buf;
    if ((work = PyMem_Malloc(2 * (size_t)h2 * sizeof(float))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    float *g = work, *hid = work + h2;
    for (Py_ssize_t k = 0; k < m; k++) {
        const Py_ssize_t r = row(nodes, k, n);
        if (r < 0)
            goto done;
        const float *x = xr + k * 9;
        if (dead[k]) {
            if (uses_z) {
                PyErr_SetString(PyExc_TypeError, "dead rows with z: numpy's");
                goto done;
            }
            out[k] = dead_out;
            continue;
        }
        /* g = relu(x . req_w[:, :2H] + pre[r, :2H]) */
        for (Py_ssize_t j = 0; j < h2; j++)
            g[j] = 0.0f;
        for (int i = 0; i < 9; i++) {
            const float xi = x[i], *w = req_w + i * wd;
            for (Py_ssize_t j = 0; j < h2; j++)
                g[j] += xi * w[j];
        }
        for (Py_ssize_t j = 0; j < h2; j++) {
            const float v = g[j] + pre[r * wd + j];
            g[j] = v > 0.0f ? v : 0.0f;
        }
        if (uses_z) {
            const float *att = b[9].buf, *gq = (const float *)b[10].buf + r * 9,
                        *u1 = (const float *)b[11].buf + r * h2,
                        *ud = (const float *)b[12].buf + r * h2;
            float dot = 0.0f;
            for (int i = 0; i < 9; i++)
                dot += x[i] * gq[i];
            float d = att[r] + dot;
            d = d < -80.0f ? -80.0f : d > 80.0f ? 80.0f : d;
            const float a0 = 1.0f / (1.0f + expf(d));
            for (Py_ssize_t j = 0; j < h2; j++)
                hid[j] = u1[j] + a0 * ud[j];
        } else {
            for (Py_ssize_t j = 0; j < h2; j++)
                hid[j] = 0.0f;
        }
        /* hid += g . w1g (+ b1 without z), relu, . w2 */
        for (Py_ssize_t i = 0; i < h2; i++) {
            const float gi = g[i], *w = w1g + i * h2;
            if (gi == 0.0f)
                continue; /* a shut unit adds exact zeros (finite weights) */
            for (Py_ssize_t j = 0; j < h2; j++)
                hid[j] += gi * w[j];
        }
        float s = 0.0f;
        for (Py_ssize_t j = 0; j < h2; j++) {
            float v = uses_z ? hid[j] : hid[j] + b1[j];
            s += (v > 0.0f ? v : 0.0f) * w2[j];
        }
        out[k] = s;
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    PyMem_Free(work);
    while (held-- > 0)
        PyBuffer_Release(&b[held]);
    return ret;
}

static PyMethodDef methods[] = {
    {"stale", stale, METH_VARARGS, "stale(nodes, at, epoch, out) -> count"},
    {"extremes", extremes, METH_VARARGS, "extremes(quant, nodes, lo, hi) -> bool"},
    {"request_rows", request_rows, METH_VARARGS,
     "request_rows(q, lo, hi, hib, tel_age, ages, tel, present, dead, nodes, xr, dead_out)"},
    {"lookup", lookup, METH_VARARGS,
     "lookup(nodes, at, e_at, e_age, ages, e_logit, out, todo) -> count"},
    {"few_head", few_head, METH_VARARGS,
     "few_head(xr, dead, nodes, req_w, pre, w1g, b1, w2, dead_out, out, att, gq, u1, ud)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dsan._headscan",
    "The head cache's passes over a request's candidates in C (dsan.model.headscan).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__headscan(void) { return PyModule_Create(&module); }
