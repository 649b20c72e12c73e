/* DSAN's quantized logits to the sidecar's 0..max_score scores and their winner, compiled:
 * the C twin of scale_py in dsan/policies/logitscale.py (read that first).
 *
 * Why C: in numpy, quantize_logits, normalize and argmax are three passes and a dozen small
 * calls over the m candidates (~9 us of a reply at 100 nodes, ~16 us at 1,000); here two
 * loops.
 * Why it stays exact: max and min have one answer in any order for finite values (a signed
 * zero can only show in the integer scores as 0); each score is the same float64
 * expressions as numpy's, in its order: (v - lo) * (max_score / span), rint (round half to
 * even, the default rounding mode, as np.rint), truncated to int64 as astype does. Built with
 * -ffp-contract=off (setup.py), though no multiply here feeds an add. A non-finite logit or
 * a span past float64 returns -1 and the caller asks numpy.
 */
#include "_buffer.h"
#include <math.h>

/* scale(logits, half, max_score, out) -> best: out[k] = normalize(quantize_logits(logits))[k]
 * for a C-contiguous 1-d float64 logits and int64 out of the same length; best is the first
 * position of the largest score, or -1 (out unspecified) when numpy must decide: no
 * logits, a non-finite one, or a span that overflows float64. TypeError for other
 * arrays. */
static PyObject *scale(PyObject *self, PyObject *args)
{
    PyObject *lo_obj, *oo;
    double half;
    long long max_score;
    Py_buffer lb, ob;
    PyObject *ret = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OdLO", &lo_obj, &half, &max_score, &oo))
        return NULL;
    if (dsan_buffer(lo_obj, &lb, "d", 8, 0) < 0)
        return NULL;
    if (lb.ndim != 1) {
        dsan_bad_shape(&lb);
        return NULL;
    }
    if (dsan_buffer(oo, &ob, "q", 8, 1) < 0)
        goto e1;
    if (ob.ndim != 1 || ob.shape[0] != lb.shape[0]) {
        PyErr_SetString(PyExc_TypeError, "out of the logits' length");
        goto e2;
    }
    const Py_ssize_t m = lb.shape[0];
    const double *s = lb.buf;
    long long *out = ob.buf;
    Py_ssize_t best = -1;
    if (m == 0)
        goto done;
    double hi = s[0];
    for (Py_ssize_t k = 0; k < m; k++) {
        if (!isfinite(s[k]))
            goto done;
        if (s[k] > hi)
            hi = s[k];
    }
    /* quantize_logits: every logit >= hi - half becomes hi (hi itself included) */
    const double thr = hi - half;
    double lo = hi;
    for (Py_ssize_t k = 0; k < m; k++)
        if (s[k] < thr && s[k] < lo)
            lo = s[k];
    if (!(hi > lo)) { /* all equal after quantizing: normalize gives max_score to all */
        for (Py_ssize_t k = 0; k < m; k++)
            out[k] = max_score;
        best = 0;
        goto done;
    }
    const double span = hi - lo;
    if (!(span < INFINITY))
        goto done;
    const double f = (double)max_score / span;
    long long top = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        const double v = s[k] >= thr ? hi : s[k];
        const long long o = (long long)rint((v - lo) * f);
        out[k] = o;
        if (best < 0 || o > top) {
            top = o;
            best = k;
        }
    }
done:
    ret = PyLong_FromSsize_t(best);
e2:
    PyBuffer_Release(&ob);
e1:
    PyBuffer_Release(&lb);
    return ret;
}

static PyMethodDef methods[] = {
    {"scale", scale, METH_VARARGS, "normalize(quantize_logits(logits)) and its first argmax"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dsan._logitscale", NULL, -1,
                                    methods};

PyMODINIT_FUNC PyInit__logitscale(void) { return PyModule_Create(&module); }
