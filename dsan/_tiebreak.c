/* The sidecar's tie-break, compiled: the C twin of lowest_name_wins_py in sidecar/tiebreak.py
 * (read that first).
 *
 * Why C: every reply runs it, and in numpy even the usual answer, no tie, is a comparison, a
 * nonzero and half a dozen small calls (~4-5 us of a reply at 100 nodes once the scoring
 * work has cooled the caches); here one loop over the scores and, for tied positions only,
 * their row's name rank (tie), and on a tie one more to write the demoted copy (demote).
 */
#include "_buffer.h"

/* tie(scores, best, rows, rank) -> win: scores, rows int64 of one length m, rank int64 of
 * the table's length. -1: nothing to break (best < 0, scores[best] <= 0, or one position
 * holds the top); -2: a tied position's row is outside rank (the caller asks numpy, which
 * raises); else the position, among those scored like scores[best], of the lowest
 * rank[rows[k]], the first of equal ones. TypeError for other arrays. */
static PyObject *tie(PyObject *self, PyObject *args)
{
    PyObject *so, *ro, *ko;
    Py_ssize_t best;
    Py_buffer sb, rb, kb;
    PyObject *ret = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OnOO", &so, &best, &ro, &ko))
        return NULL;
    if (dsan_buffer(so, &sb, "q", 8, 0) < 0)
        return NULL;
    if (sb.ndim != 1) {
        dsan_bad_shape(&sb);
        return NULL;
    }
    if (dsan_buffer(ro, &rb, "q", 8, 0) < 0)
        goto e1;
    if (rb.ndim != 1 || rb.shape[0] != sb.shape[0]) {
        dsan_bad_shape(&rb);
        goto e1;
    }
    if (dsan_buffer(ko, &kb, "q", 8, 0) < 0)
        goto e2;
    if (kb.ndim != 1) {
        dsan_bad_shape(&kb);
        goto e2;
    }
    const Py_ssize_t m = sb.shape[0], n = kb.shape[0];
    const long long *s = sb.buf, *rows = rb.buf, *rank = kb.buf;
    Py_ssize_t win = -1;
    if (best < 0 || best >= m || s[best] <= 0)
        goto done;
    const long long top = s[best];
    Py_ssize_t tied = 0;
    long long low = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        if (s[k] != top)
            continue;
        const long long r = rows[k];
        if (r < 0 || r >= n) {
            win = -2;
            goto done;
        }
        if (tied == 0 || rank[r] < low) {
            low = rank[r];
            win = k;
        }
        tied++;
    }
    if (tied < 2)
        win = -1;
done:
    ret = PyLong_FromSsize_t(win);
    PyBuffer_Release(&kb);
e2:
    PyBuffer_Release(&rb);
e1:
    PyBuffer_Release(&sb);
    return ret;
}

/* demote(scores, win, out): out[k] = scores[k] - (scores[k] == scores[win]), then
 * out[win] = scores[win]; int64 arrays of one length, win inside. TypeError otherwise. */
static PyObject *demote(PyObject *self, PyObject *args)
{
    PyObject *so, *oo;
    Py_ssize_t win;
    Py_buffer sb, ob;
    PyObject *ret = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OnO", &so, &win, &oo))
        return NULL;
    if (dsan_buffer(so, &sb, "q", 8, 0) < 0)
        return NULL;
    if (dsan_buffer(oo, &ob, "q", 8, 1) < 0)
        goto e1;
    if (sb.ndim != 1 || ob.ndim != 1 || ob.shape[0] != sb.shape[0] || win < 0
        || win >= sb.shape[0]) {
        dsan_bad_shape(&ob);
        goto e1;
    }
    const Py_ssize_t m = sb.shape[0];
    const long long *s = sb.buf;
    long long *out = ob.buf;
    const long long top = s[win];
    for (Py_ssize_t k = 0; k < m; k++)
        out[k] = s[k] - (s[k] == top);
    out[win] = top;
    Py_INCREF(Py_None);
    ret = Py_None;
    PyBuffer_Release(&ob);
e1:
    PyBuffer_Release(&sb);
    return ret;
}

static PyMethodDef methods[] = {
    {"tie", tie, METH_VARARGS, "the position that keeps a tied top score, or -1 / -2"},
    {"demote", demote, METH_VARARGS, "the tied top scores one less, but the winner's"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dsan._tiebreak", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tiebreak(void) { return PyModule_Create(&module); }
