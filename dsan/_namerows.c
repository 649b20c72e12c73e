/* Candidate names to node-table rows, compiled: the C twin of name_rows_py in
 * sidecar/candidates.py (read that first).
 *
 * Why C: every extender request (and every gRPC request that sends names) maps each
 * candidate name to its row. numpy's fromiter over map(dict.__getitem__, names) pays a
 * method-wrapper call and an int conversion through the iterator protocol per name, ~40 ns;
 * here a dictionary lookup and a store, ~15-20 ns (4.4 -> 1.9 us at 100 names, 212 -> 112 us
 * at 5,000 on the development machine).
 */
#include "_buffer.h"

/* rows(names, index, missing, out) -> unknown: names a list or tuple of m keys, index an
 * exact dict of key -> int, out int64 of length m, written with each name's row or missing
 * for a name not in index; the number of such names. TypeError for another container, a
 * non-int row or another out (the caller then asks the Python twin); a key that cannot be
 * hashed raises as dict lookup does. */
static PyObject *rows(PyObject *self, PyObject *args)
{
    PyObject *names, *index;
    long long missing;
    PyObject *oo;
    Py_buffer ob;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOLO", &names, &index, &missing, &oo))
        return NULL;
    if (!(PyList_CheckExact(names) || PyTuple_CheckExact(names)) || !PyDict_CheckExact(index)) {
        PyErr_SetString(PyExc_TypeError, "names must be a list or tuple, index a dict");
        return NULL;
    }
    if (dsan_buffer(oo, &ob, "q", 8, 1) < 0)
        return NULL;
    /* A list's items are read through PySequence_Fast_ITEMS: nothing here calls back into
     * Python code that could resize it (str keys hash and compare in C). */
    const Py_ssize_t m = PySequence_Fast_GET_SIZE(names);
    if (ob.ndim != 1 || ob.shape[0] != m) {
        dsan_bad_shape(&ob);
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(names);
    long long *out = ob.buf;
    Py_ssize_t unknown = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        PyObject *v = PyDict_GetItemWithError(index, items[k]);
        if (v == NULL) {
            if (PyErr_Occurred())
                goto fail;
            out[k] = missing;
            unknown++;
            continue;
        }
        if (!PyLong_CheckExact(v)) {
            PyErr_SetString(PyExc_TypeError, "a row that is not an int");
            goto fail;
        }
        out[k] = PyLong_AsLongLong(v);
        if (out[k] == -1 && PyErr_Occurred())
            goto fail;
    }
    PyBuffer_Release(&ob);
    return PyLong_FromSsize_t(unknown);
fail:
    PyBuffer_Release(&ob);
    return NULL;
}

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS, "each name's row (missing if absent); the number absent"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dsan._namerows", NULL, -1, methods};

PyMODINIT_FUNC PyInit__namerows(void) { return PyModule_Create(&module); }
