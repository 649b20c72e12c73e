/* The head cache's passes over a request's candidates, compiled: the C twins of the numpy
 * functions in dsan/model/headscan.py (read that first).
 *
 * Why C: a DSAN reply looks each candidate up in its pod class's cache: is its row stale,
 * the candidates' per-quantity extremes, has its logit been computed under them. In numpy
 * that is ~15 calls of gathers, compares and reductions over the m candidates (~30 us at
 * 1,000 nodes, ~90 us at 5,000); here it is three loops. A settle's follow-up of a class
 * (followed: its next candidates and their stale rows) is one more.
 * Why it stays exact: only gathers, comparisons and min / max, which have one answer in
 * any order, except for a NaN among the values or a zero extreme (numpy then decides which
 * NaN or which signed zero): extremes() returns False there and the caller asks numpy.
 * The request-row and MLP passes (request_rows, head_logits) are in dsan/_headrows.h,
 * included below: one module, two files for readability.
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

/* followed(last, epoch, seen, ok, at, nodes_out, rows_out) -> (count, stale, moved): a pod
 * class's next candidates and its stale rows among them, in one pass over the n nodes, as
 * dsan.model.headscan.followed_py computes them (read that first). The changed nodes are
 * those whose epoch is past seen; a changed node of last that no longer fits (ok false) is
 * dropped (every occurrence), a changed node outside last that now fits is appended, in
 * node order. moved: something was dropped or appended (nodes_out[:count] then holds the
 * new candidates; otherwise last stands and count is its length). rows_out[:stale]: the
 * candidates whose class row is older than their epoch (at < epoch), each once, ascending.
 * Integer compares and copies only: one answer whatever the order. */
static PyObject *followed(PyObject *self, PyObject *args)
{
    PyObject *o[6];
    long long seen;
    Py_buffer lb, eb, kb, ab, nb, rb;
    PyObject *ret = NULL;
    unsigned char *mark = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOLOOOO", &o[0], &o[1], &seen, &o[2], &o[3], &o[4], &o[5]))
        return NULL;
    if (get(o[0], &lb, "q", 8, 0, 0) < 0)
        return NULL;
    if (get(o[1], &eb, "q", 8, 0, 0) < 0)
        goto f1;
    if (get(o[2], &kb, "?", 1, 0, 0) < 0)
        goto f2;
    if (get(o[3], &ab, "q", 8, 0, 0) < 0)
        goto f3;
    if (get(o[4], &nb, "q", 8, 1, 0) < 0)
        goto f4;
    if (get(o[5], &rb, "q", 8, 1, 0) < 0)
        goto f5;
    const Py_ssize_t m = lb.shape[0], n = eb.shape[0];
    if (kb.shape[0] != n || ab.shape[0] != n || nb.shape[0] < m + n || rb.shape[0] < n) {
        PyErr_SetString(PyExc_TypeError, "ok and at as long as epoch, outputs too short");
        goto f6;
    }
    const long long *last = lb.buf, *ep = eb.buf, *at = ab.buf;
    const char *ok = kb.buf;
    long long *nodes = nb.buf, *rows = rb.buf;
    /* 0 outside last, 1 inside, 2 inside and dropped */
    mark = PyMem_Calloc(n > 0 ? (size_t)n : 1, 1);
    if (mark == NULL) {
        PyErr_NoMemory();
        goto f6;
    }
    for (Py_ssize_t k = 0; k < m; k++) {
        if (last[k] < 0 || last[k] >= n) { /* numpy wraps negatives: its twin decides */
            PyErr_SetString(PyExc_TypeError, "a candidate row out of 0..n-1");
            goto f7;
        }
        mark[last[k]] = 1;
    }
    int moved = 0;
    for (Py_ssize_t r = 0; r < n; r++)
        if (ep[r] > seen) {
            if (mark[r] && !ok[r]) {
                mark[r] = 2;
                moved = 1;
            } else if (!mark[r] && ok[r]) {
                moved = 1;
            }
        }
    Py_ssize_t count = m, stale = 0;
    if (moved) {
        count = 0;
        for (Py_ssize_t k = 0; k < m; k++)
            if (mark[last[k]] != 2) /* in range: checked above */
                nodes[count++] = last[k];
    }
    for (Py_ssize_t r = 0; r < n; r++) {
        const int added = !mark[r] && ep[r] > seen && ok[r]; /* only when moved */
        if (added)
            nodes[count++] = r;
        if ((mark[r] == 1 || added) && at[r] < ep[r])
            rows[stale++] = r;
    }
    ret = Py_BuildValue("nnO", count, stale, moved ? Py_True : Py_False);
f7:
    PyMem_Free(mark);
f6:
    PyBuffer_Release(&rb);
f5:
    PyBuffer_Release(&nb);
f4:
    PyBuffer_Release(&ab);
f3:
    PyBuffer_Release(&kb);
f2:
    PyBuffer_Release(&eb);
f1:
    PyBuffer_Release(&lb);
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

/* request_rows, mlp_row and head_logits: the request-row and MLP passes (they use get,
 * length and row above). */
#include "_headrows.h"

static PyMethodDef methods[] = {
    {"stale", stale, METH_VARARGS, "stale(nodes, at, epoch, out) -> count"},
    {"followed", followed, METH_VARARGS,
     "followed(last, epoch, seen, ok, at, nodes_out, rows_out) -> (count, stale, moved)"},
    {"extremes", extremes, METH_VARARGS, "extremes(quant, nodes, lo, hi) -> bool"},
    {"request_rows", request_rows, METH_VARARGS,
     "request_rows(q, lo, hi, hib, tel_age, ages, tel, present, dead, nodes, xr, dead_out)"},
    {"lookup", lookup, METH_VARARGS,
     "lookup(nodes, at, e_at, e_age, ages, e_logit, out, todo) -> count"},
    {"head_logits", head_logits, METH_VARARGS,
     "head_logits(nodes, todo, quant, lo, hi, hib, ages, log1p_hour, tel, present, dead, "
     "req_w, pre, w1g, b1, w2, dead_out, b2, c_at, e_logit, e_at, e_age, out, att, gq, u1, "
     "ud)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dsan._headscan",
    "The head cache's passes over a request's candidates in C (dsan.model.headscan).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__headscan(void) { return PyModule_Create(&module); }
