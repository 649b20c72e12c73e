/* DSAN's reply from the logits its pod class holds, compiled: the C twin of held_py in
 * dsan/model/heldreply.py (read that first).
 *
 * Why C: after the post-reply settle (HeadCache.prefetch) the class holds every logit the
 * next request reads; the reply then only checks that they are current and that the
 * candidates' extremes are the ones they were computed under, and scales them. Through the
 * general path that is ~25 Python calls and three C passes (~27 us warm at 100 nodes);
 * here one pass checks and gathers, and two more scale.
 * Why it stays exact: the checks are comparisons (a NaN anywhere, an unknown row, a
 * non-finite logit or a span past float64 defer to the general path), the extremes min and
 * max (one answer in any order; compared with ==, so a signed zero is the same extreme), and
 * the scores the same float64 expressions in the same order as dsan/_logitscale.c (and so
 * as normalize(quantize_logits(...))), over the feasible candidates only, infeasible ones 0.
 */
#include "_buffer.h"
#include <math.h>

/* A C-contiguous buffer of the given format and item size with count items in all. */
static int flat(PyObject *o, Py_buffer *b, const char *fmt, Py_ssize_t size, int writable,
                Py_ssize_t count)
{
    if (dsan_buffer(o, b, fmt, size, writable) < 0)
        return -1;
    if (count >= 0 && b->len != count * size)
        return dsan_bad_shape(b);
    return 0;
}

/* held(rows, ok, quant, lo, hi, c_at, epoch, e_at, e_age, ages, e_logit, half, max_score,
 * out) -> (best, n_ok) or None: out[k] the score of candidate rows[k] (0 if not ok) and best
 * the position of the first feasible maximum, when every feasible candidate's held logit is
 * current and their extremes are lo (5) and hi (7); None (out unspecified) when the general
 * path must answer. ages is None without telemetry (held ages are then inf). */
static PyObject *held(PyObject *self, PyObject *args)
{
    PyObject *o[12];
    double half;
    long long max_score;
    Py_buffer b[12];
    int count = 0;
    PyObject *ret = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOdLO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &o[8], &o[9], &o[10], &half, &max_score, &o[11]))
        return NULL;
    const int tel = o[9] != Py_None;
    /* rows ok quant lo hi c_at epoch e_at e_age ages e_logit out */
    static const char *fmt[12] = {"q", "?", "d", "d", "d", "q", "q", "q", "d", "d", "d", "q"};
    static const Py_ssize_t size[12] = {8, 1, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
    for (; count < 12; count++) {
        if (count == 9 && !tel)
            continue;
        Py_ssize_t want = count == 3 ? 5 : count == 4 ? 7 : -1;
        if (flat(o[count], &b[count], fmt[count], size[count], count == 11, want) < 0)
            goto done;
    }
    const Py_ssize_t m = b[0].len / 8, n = b[1].len;
    int ok_shape = b[2].len == 7 * n * 8 && b[11].len == m * 8;
    for (int i = 5; i <= 10; i++)
        if (i != 9 || tel)
            ok_shape = ok_shape && b[i].len == n * 8;
    if (!ok_shape) {
        PyErr_SetString(PyExc_TypeError, "arrays of inconsistent lengths");
        goto done;
    }
    const long long *rows = b[0].buf, *c_at = b[5].buf, *epoch = b[6].buf, *e_at = b[7].buf;
    const char *ok = b[1].buf;
    const double *q = b[2].buf, *lo = b[3].buf, *hi = b[4].buf, *e_age = b[8].buf;
    const double *ages = tel ? b[9].buf : NULL, *logit = b[10].buf;
    long long *out = b[11].buf;
    double mn[5] = {INFINITY, INFINITY, INFINITY, INFINITY, INFINITY};
    double mx[7] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
                    -INFINITY};
    double top = -INFINITY;
    Py_ssize_t n_ok = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        const long long r = rows[k];
        if (r < 0 || r >= n) /* an unknown name (the sentinel): the general path's case */
            goto defer;
        if (!ok[r])
            continue;
        n_ok++;
        /* the class row current, the logit computed from it at the node's telemetry age
         * (NaN never equals: the general path recomputes such a logit every time) */
        const double age = tel ? ages[r] : INFINITY;
        if (c_at[r] < epoch[r] || e_at[r] != c_at[r] || !(e_age[r] == age))
            goto defer;
        const double s = logit[r];
        if (!isfinite(s))
            goto defer;
        if (s > top)
            top = s;
        for (int j = 0; j < 7; j++) {
            const double v = q[j * n + r];
            if (isnan(v))
                goto defer;
            if (j < 5 && v < mn[j])
                mn[j] = v;
            if (v > mx[j])
                mx[j] = v;
        }
    }
    if (n_ok == 0)
        goto defer;
    for (int j = 0; j < 7; j++)
        if ((j < 5 && !(mn[j] == lo[j])) || !(mx[j] == hi[j]))
            goto defer;
    /* quantize_logits: every logit >= top - half becomes top; then normalize */
    const double thr = top - half;
    double low = top;
    for (Py_ssize_t k = 0; k < m; k++) {
        const long long r = rows[k];
        if (ok[r] && logit[r] < thr && logit[r] < low)
            low = logit[r];
    }
    Py_ssize_t best = -1;
    if (!(top > low)) { /* all feasible equal after quantizing: max_score each */
        for (Py_ssize_t k = 0; k < m; k++) {
            out[k] = ok[rows[k]] ? max_score : 0;
            if (best < 0 && ok[rows[k]])
                best = k;
        }
    } else {
        const double span = top - low;
        if (!(span < INFINITY))
            goto defer;
        const double f = (double)max_score / span;
        long long hi_score = 0;
        for (Py_ssize_t k = 0; k < m; k++) {
            const long long r = rows[k];
            if (!ok[r]) {
                out[k] = 0;
                continue;
            }
            const double v = logit[r] >= thr ? top : logit[r];
            const long long s = (long long)rint((v - low) * f);
            out[k] = s;
            if (best < 0 || s > hi_score) {
                hi_score = s;
                best = k;
            }
        }
    }
    ret = Py_BuildValue("(nn)", best, n_ok);
    goto done;
defer:
    ret = Py_NewRef(Py_None);
done:
    for (int i = 0; i < count; i++)
        if (i != 9 || tel)
            PyBuffer_Release(&b[i]);
    return ret;
}

static PyMethodDef methods[] = {
    {"held", held, METH_VARARGS,
     "held(rows, ok, quant, lo, hi, c_at, epoch, e_at, e_age, ages, e_logit, half, max_score, "
     "out) -> (best, n_ok) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dsan._heldreply", NULL, -1,
                                    methods};

PyMODINIT_FUNC PyInit__heldreply(void) { return PyModule_Create(&module); }
