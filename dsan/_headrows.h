/* The head's request-row and MLP passes of dsan/_headscan.c: request_rows (the 9 request
 * columns and dead flags of m rows), mlp_row (the head's MLP on one row, O3, cloned for
 * AVX2) and head_logits (the whole head on a candidate set's changed rows), the C twins of
 * dsan.model.headscan's request_rows_py, few_head_py and head_logits_py (read those first;
 * each function's comment says why its bits match). Included by dsan/_headscan.c only, after
 * its buffer helpers get, length and row, which both halves use: one extension module
 * (dsan._headscan), its source split in two for readability.
 */
#ifndef DSAN_HEADROWS_H
#define DSAN_HEADROWS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

/* One row's 9 request columns into xr, as dsan.model.headscan.request_rows_py computes
 * them: the min-max ranks of its quantities q[j * stride] (j < 7) within lo / hi (hib: higher
 * is better), the two "ties with the best" flags, the telemetry age column tel_age clipped
 * at 1 and the presence flag; 1 if every column lies in [0, 1] (NaN: 0). Shared by
 * request_rows (gathered quantities) and head_logits (the class's, in place). */
static int request_columns(const double *q, Py_ssize_t stride, const double *lo,
                           const double *hi, const char *hib, double tel_age, int present,
                           float *xr)
{
    double v[9];
    for (int j = 0; j < 5; j++) {
        const double lj = lo[j], hj = hi[j], x = q[j * stride];
        v[j < 4 ? j : 6] = hj > lj ? (hib[j] ? x - lj : hj - x) / (hj - lj) : 1.0;
    }
    v[4] = q[5 * stride] >= hi[5];
    v[5] = q[6 * stride] >= hi[6] - 1e-9;
    v[7] = tel_age > 1.0 ? 1.0 : tel_age;
    v[8] = present;
    int bounded = 1;
    for (int j = 0; j < 9; j++) {
        const float f = (float)v[j];
        xr[j] = f;
        bounded &= f >= 0.0f && f <= 1.0f; /* NaN: not bounded */
    }
    return bounded;
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
    for (Py_ssize_t k = 0; k < m; k++)
        bounded &= request_columns(q + k, m, lo, hi, hib, tel_age[k], tel && isfinite(ages[k]),
                                   xr + k * 9);
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

/* The head's MLP on one row r with request columns x (9): the sum before the linear term
 * and the last bias (see dsan.model.headscan.few_head_py). g and hid are 2H floats of work
 * space. A dead row without z is dead_out itself; with z (att != NULL) it adds no g term, as
 * the many-row head leaves dead rows out of g w1g. float32 throughout; each output's sums
 * run over i in one order, so vectorising across the 2H outputs changes no bits. A shut
 * unit (g_i == 0) is summed too: it adds zeros (finite weights), and skipping it cost a
 * mispredicted branch per unit. Compiled at O3
 * and cloned for AVX2 (picked at load time where the CPU has it; no FMA: -ffp-contract=off
 * and no "fma" target, so the clones give the same bits). */
__attribute__((optimize("O3"), target_clones("avx2", "default"))) static float
mlp_row(const float *x, int is_dead, Py_ssize_t r, const float *req_w, Py_ssize_t wd,
        const float *pre, const float *w1g, const float *b1, const float *w2, Py_ssize_t h2,
        float dead_out, const float *att, const float *gq, const float *u1, const float *ud,
        float *g, float *hid)
{
    const int uses_z = att != NULL;
    if (is_dead && !uses_z)
        return dead_out;
    if (uses_z) {
        const float *gqr = gq + r * 9, *u1r = u1 + r * h2, *udr = ud + r * h2;
        float dot = 0.0f;
        for (int i = 0; i < 9; i++)
            dot += x[i] * gqr[i];
        float d = att[r] + dot;
        d = d < -80.0f ? -80.0f : d > 80.0f ? 80.0f : d;
        const float a0 = 1.0f / (1.0f + expf(d));
        for (Py_ssize_t j = 0; j < h2; j++)
            hid[j] = u1r[j] + a0 * udr[j];
    } else {
        for (Py_ssize_t j = 0; j < h2; j++)
            hid[j] = 0.0f;
    }
    if (!is_dead) {
        /* g = relu(x . req_w[:, :2H] + pre[r, :2H]) */
        for (Py_ssize_t j = 0; j < h2; j++)
            g[j] = 0.0f;
        for (int i = 0; i < 9; i++) {
            const float xi = x[i], *w = req_w + i * wd;
            for (Py_ssize_t j = 0; j < h2; j++)
                g[j] += xi * w[j];
        }
        const float *p = pre + r * wd;
        for (Py_ssize_t j = 0; j < h2; j++) {
            const float v = g[j] + p[j];
            g[j] = v > 0.0f ? v : 0.0f;
        }
        /* hid += g . w1g, 32 outputs at a time held in registers across the h2 inputs */
        Py_ssize_t j0 = 0;
        for (; j0 + 32 <= h2; j0 += 32) {
            float acc[32];
            for (int t = 0; t < 32; t++)
                acc[t] = hid[j0 + t];
            for (Py_ssize_t i = 0; i < h2; i++) {
                const float gi = g[i], *w = w1g + i * h2 + j0;
                for (int t = 0; t < 32; t++)
                    acc[t] += gi * w[t];
            }
            for (int t = 0; t < 32; t++)
                hid[j0 + t] = acc[t];
        }
        for (; j0 < h2; j0++) {
            float a = hid[j0];
            for (Py_ssize_t i = 0; i < h2; i++)
                a += g[i] * w1g[i * h2 + j0];
            hid[j0] = a;
        }
    }
    float s = 0.0f;
    for (Py_ssize_t j = 0; j < h2; j++) {
        const float v = uses_z ? hid[j] : hid[j] + b1[j];
        s += (v > 0.0f ? v : 0.0f) * w2[j];
    }
    return s;
}

/* head_logits(nodes, todo, quant, lo, hi, hib, ages, log1p_hour, tel, present, dead, req_w,
 *             pre, w1g, b1, w2, dead_out, b2, c_at, e_logit, e_at, e_age, out, att, gq, u1,
 *             ud):
 * the whole head on the candidates nodes[todo] in one call (the head cache's logits to
 * compute under one candidate set's extremes, see dsan.model.headscan.head_logits_py):
 * their request columns from the class's quantities quant (7, n) as request_rows computes
 * them, each row's telemetry age from ages (n,; None: no telemetry, inf) as
 * dsan.features.age_columns transforms it, dead as request_rows decides it over the rows,
 * mlp_row, then the linear term pre[r, 2H] + x . req_w[:, 2H] and the last bias in float32;
 * the logit stored at its row in e_logit with the row's class tick (c_at) in e_at and its
 * age in e_age, and out[todo] read back from e_logit (a node listed twice reads what was
 * kept). */
static PyObject *head_logits(PyObject *self, PyObject *args)
{
    enum { NODES, TODO, QUANT, LO, HI, HIB, PRESENT, DEAD, REQ_W, PRE, W1G, B1, W2, C_AT,
           E_LOGIT, E_AT, E_AGE, OUT, ATT, GQ, U1, UD, AGES, COUNT };
    PyObject *o[COUNT];
    int tel;
    double log1p_hour;
    float dead_out, b2;
    Py_buffer b[COUNT];
    int held = 0;
    PyObject *ret = NULL;
    float *work = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOOdpOOOOOOOffOOOOOOOOO", &o[NODES], &o[TODO], &o[QUANT],
                          &o[LO], &o[HI], &o[HIB], &o[AGES], &log1p_hour, &tel, &o[PRESENT],
                          &o[DEAD], &o[REQ_W], &o[PRE], &o[W1G], &o[B1], &o[W2], &dead_out,
                          &b2, &o[C_AT], &o[E_LOGIT], &o[E_AT], &o[E_AGE], &o[OUT], &o[ATT],
                          &o[GQ], &o[U1], &o[UD]))
        return NULL;
    const int uses_z = o[ATT] != Py_None, has_ages = o[AGES] != Py_None;
    static const char *fmt[COUNT] = {"q", "q", "d", "d", "d", "?", "f", "?", "f", "f", "f", "f",
                                      "f", "q", "d", "q", "d", "d", "f", "f", "f", "f", "d"};
    static const Py_ssize_t size[COUNT] = {8, 8, 8, 8, 8, 1, 4, 1, 4, 4, 4, 4,
                                           4, 8, 8, 8, 8, 8, 4, 4, 4, 4, 8};
    static const int wr[COUNT] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                  0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0};
    static const Py_ssize_t rows[COUNT] = {0, 0, 7, 5, 7, 0, 0, 0, 9, -1, -1, 0,
                                           0, 0, 0, 0, 0, 0, 0, -1, -1, -1, 0};
    /* the z arrays and ages only when given: the held ones are b[0 .. held) */
    int slots[COUNT], count = 0;
    for (int i = 0; i < COUNT; i++)
        if ((i < ATT || i > UD || uses_z) && (i != AGES || has_ages))
            slots[count++] = i;
    for (; held < count; held++)
        if (get(o[slots[held]], &b[slots[held]], fmt[slots[held]], size[slots[held]],
                wr[slots[held]], rows[slots[held]]) < 0)
            goto done;
    const Py_ssize_t m = b[NODES].shape[0], k = b[TODO].shape[0], n = b[PRESENT].shape[0];
    const Py_ssize_t h2 = b[B1].shape[0], wd = b[REQ_W].shape[1];
    int ok = b[QUANT].shape[1] == n && b[LO].shape[1] == 1 && b[HI].shape[1] == 1
             && b[HIB].shape[0] == 5 && b[DEAD].shape[0] == n && wd == h2 + 1
             && b[PRE].shape[0] == n && b[PRE].shape[1] == wd && b[W1G].shape[0] == h2
             && b[W1G].shape[1] == h2 && b[W2].shape[0] == h2 && b[C_AT].shape[0] == n
             && b[E_LOGIT].shape[0] == n && b[E_AT].shape[0] == n && b[E_AGE].shape[0] == n
             && b[OUT].shape[0] == m && (!has_ages || b[AGES].shape[0] == n);
    if (uses_z)
        ok = ok && b[ATT].shape[0] == n && b[GQ].shape[0] == n && b[GQ].shape[1] == 9
             && b[U1].shape[0] == n && b[U1].shape[1] == h2 && b[UD].shape[0] == n
             && b[UD].shape[1] == h2;
    if (!ok) {
        PyErr_SetString(PyExc_TypeError, "arrays of inconsistent shapes");
        goto done;
    }
    const long long *nodes = b[NODES].buf, *todo = b[TODO].buf, *c_at = b[C_AT].buf;
    const double *q = b[QUANT].buf, *lo = b[LO].buf, *hi = b[HI].buf;
    const double *ages = has_ages ? b[AGES].buf : NULL;
    const char *hib = b[HIB].buf, *dead_in = b[DEAD].buf;
    const float *present = b[PRESENT].buf, *req_w = b[REQ_W].buf;
    double *e_logit = b[E_LOGIT].buf, *e_age = b[E_AGE].buf, *out = b[OUT].buf;
    long long *e_at = b[E_AT].buf;
    /* xr (k, 9), g and hid (2H each) */
    if ((work = PyMem_Malloc(((size_t)k * 9 + 2 * (size_t)h2) * sizeof(float) + 1)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    float *xr = work, *g = work + k * 9, *hid = g + h2;
    /* every todo entry and its node in range before anything is written */
    for (Py_ssize_t t = 0; t < k; t++)
        if (row(todo, t, m) < 0 || row(nodes, row(todo, t, m), n) < 0)
            goto done;
    int bounded = 1; /* request_rows' columns, exactly */
    for (Py_ssize_t t = 0; t < k; t++) {
        const Py_ssize_t r = row(nodes, row(todo, t, m), n);
        /* age_columns: NaN -> 0, capped at 1e9, log1p over log1p(1 h) */
        const double age = ages ? ages[r] : INFINITY;
        const double t_age = log1p(age == age ? (age < 1e9 ? age : 1e9) : 0.0) / log1p_hour;
        bounded &= request_columns(q + r, n, lo, hi, hib, t_age, tel && isfinite(age),
                                   xr + t * 9);
    }
    for (Py_ssize_t t = 0; t < k; t++) {
        const Py_ssize_t r = row(nodes, row(todo, t, m), n);
        const float *x = xr + t * 9;
        const int is_dead = bounded && dead_in[r] && x[8] == present[r];
        float s = mlp_row(x, is_dead, r, req_w, wd, b[PRE].buf, b[W1G].buf, b[B1].buf,
                          b[W2].buf, h2, dead_out, uses_z ? b[ATT].buf : NULL,
                          uses_z ? b[GQ].buf : NULL, uses_z ? b[U1].buf : NULL,
                          uses_z ? b[UD].buf : NULL, g, hid);
        float dot = 0.0f; /* the linear term: pre[r, 2H] + x . req_w[:, 2H] */
        for (int i = 0; i < 9; i++)
            dot += x[i] * req_w[i * wd + h2];
        const float lin = ((const float *)b[PRE].buf)[r * wd + h2] + dot;
        s += lin;
        s += b2;
        e_logit[r] = (double)s;
        e_at[r] = c_at[r];
        e_age[r] = ages ? ages[r] : INFINITY;
    }
    for (Py_ssize_t t = 0; t < k; t++) {
        const Py_ssize_t p = row(todo, t, m);
        out[p] = e_logit[row(nodes, p, n)];
    }
    ret = Py_None;
    Py_INCREF(ret);
done:
    PyMem_Free(work);
    while (held-- > 0)
        PyBuffer_Release(&b[slots[held]]);
    return ret;
}

#endif /* DSAN_HEADROWS_H */
