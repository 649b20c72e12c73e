/* A pod class's cached raw scores, gathered at the candidates' rows and scaled onto
 * 0..max_score with their winner, compiled: the C twin of scale_rows_py in
 * dsan/policies/rowscale.py (read that first).
 *
 * Why C: in numpy the gather, the NaN count, fmin/fmax, the scaling, rint, the NaN-to-0, the
 * cast and the argmax are a dozen calls of 0.4-1.5 us each whatever their size (~9 us of the
 * ~20 us an FGD or k8s-default reply takes at 100 nodes); here two loops over the rows.
 * Why it stays exact: min and max have one answer in any order for finite values; each score
 * is the same float64 expressions as numpy's, in its order: (v - lo) * (max_score / span),
 * rint (round half to even, the default rounding mode, as np.rint), truncated to int64 as
 * astype does; NaN (infeasible or unknown) scores 0, as fmax(NaN, 0) makes it. Built with
 * -ffp-contract=off (setup.py), though no multiply here feeds an add. An infinite score, a
 * span past float64 or one so small that max_score / span overflows returns None and the
 * caller asks numpy.
 */
#include "_buffer.h"
#include <math.h>

/* scale_rows(rawx, rows, max_score, out) -> (best, n_nan, n_unknown) or None.
 * rawx: C-contiguous 1-d float64, NaN where infeasible, its last entry the sentinel row
 * unknown names map to; rows: C-contiguous 1-d int64 in 0..len(rawx)-1 (IndexError
 * otherwise); out: int64 of rows' length, written with the scores. best is the first
 * position of the largest score (-1 when every score is NaN), n_nan the NaN scores,
 * n_unknown the rows equal to the sentinel. None (out unspecified) when numpy must decide:
 * an infinite score, a span that overflows float64 or max_score / span that does. TypeError
 * for other arrays. */
static PyObject *scale_rows(PyObject *self, PyObject *args)
{
    PyObject *xo, *ro, *oo;
    long long max_score;
    Py_buffer xb, rb, ob;
    PyObject *ret = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOLO", &xo, &ro, &max_score, &oo))
        return NULL;
    if (dsan_buffer(xo, &xb, "d", 8, 0) < 0)
        return NULL;
    if (xb.ndim != 1 || xb.shape[0] < 1) {
        dsan_bad_shape(&xb);
        return NULL;
    }
    if (dsan_buffer(ro, &rb, "q", 8, 0) < 0)
        goto e1;
    if (rb.ndim != 1) {
        dsan_bad_shape(&rb);
        goto e1;
    }
    if (dsan_buffer(oo, &ob, "q", 8, 1) < 0)
        goto e2;
    if (ob.ndim != 1 || ob.shape[0] != rb.shape[0]) {
        PyErr_SetString(PyExc_TypeError, "out of the rows' length");
        goto e3;
    }
    const Py_ssize_t m = rb.shape[0], n1 = xb.shape[0], sentinel = xb.shape[0] - 1;
    const double *x = xb.buf;
    const long long *rows = rb.buf;
    long long *out = ob.buf;
    Py_ssize_t n_nan = 0, n_unknown = 0, best = -1;
    double lo = INFINITY, hi = -INFINITY;
    for (Py_ssize_t k = 0; k < m; k++) {
        const long long r = rows[k];
        if (r < 0 || r >= n1) {
            PyErr_SetString(PyExc_IndexError, "a row past the scores");
            goto e3;
        }
        n_unknown += r == sentinel;
        const double v = x[r];
        if (isnan(v)) {
            n_nan++;
            continue;
        }
        if (v < lo)
            lo = v;
        if (v > hi)
            hi = v;
    }
    if (n_nan == m) { /* nothing scorable: every score 0, no winner */
        for (Py_ssize_t k = 0; k < m; k++)
            out[k] = 0;
        goto done;
    }
    if (!isfinite(lo) || !isfinite(hi)) { /* an infinite score: normalize's own case */
        ret = Py_NewRef(Py_None);
        goto e3;
    }
    long long top = 0;
    if (!(hi > lo)) { /* all equal: normalize gives max_score to every scorable node */
        for (Py_ssize_t k = 0; k < m; k++) {
            const long long o = isnan(x[rows[k]]) ? 0 : max_score;
            out[k] = o;
            if (best < 0 || o > top) {
                top = o;
                best = k;
            }
        }
        goto done;
    }
    const double span = hi - lo;
    const double f = (double)max_score / span;
    /* a span past float64 (normalize scales both ends down first), or one so small that
     * max_score / span overflows (numpy's answer is then whatever its casts give) */
    if (!(span < INFINITY) || !(f < INFINITY)) {
        ret = Py_NewRef(Py_None);
        goto e3;
    }
    for (Py_ssize_t k = 0; k < m; k++) {
        const double v = x[rows[k]];
        const long long o = isnan(v) ? 0 : (long long)rint((v - lo) * f);
        out[k] = o;
        if (best < 0 || o > top) {
            top = o;
            best = k;
        }
    }
done:
    ret = Py_BuildValue("(nnn)", best, n_nan, n_unknown);
e3:
    PyBuffer_Release(&ob);
e2:
    PyBuffer_Release(&rb);
e1:
    PyBuffer_Release(&xb);
    return ret;
}

static PyMethodDef methods[] = {
    {"scale_rows", scale_rows, METH_VARARGS,
     "a class's raw scores at rows, scaled onto 0..max_score, and the first argmax"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dsan._rowscale", NULL, -1,
                                    methods};

PyMODINIT_FUNC PyInit__rowscale(void) { return PyModule_Create(&module); }
