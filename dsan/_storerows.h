/* The store of recomputed class rows (dsan.model.classrows.store_py's operations, see
 * dsan/_classrows.c for why they match): shared by dsan._classrows.store and the few-row
 * update of dsan/_memorows.c.
 */
#ifndef DSAN_STOREROWS_H
#define DSAN_STOREROWS_H

#include <math.h>

/* A class's arrays the store writes, over n nodes; w = 2H + 1 columns of pre. */
typedef struct {
    Py_ssize_t n, h, w, h2;
    const float *bias, *req_top, *req_age;
    const double *ages; /* NULL without telemetry */
    float *pre, *present;
    char *dead;
    double *quant;
    long long *at;
} Store;

/* rows[k] (in [-n, n), read as numpy indexes) from first (m, h + w) and q (m, 7). */
static void store_rows(const Store *s, const float *first, const long long *rows,
                       Py_ssize_t m, const double *q, long long tick)
{
    const Py_ssize_t h = s->h, w = s->w, h2 = s->h2, n = s->n;
    const int has_ages = s->ages != NULL;
    for (Py_ssize_t k = 0; k < m; k++) {
        const long long r = rows[k] < 0 ? rows[k] + n : rows[k];
        const float *src = first + k * (h + w) + h;
        float *dst = s->pre + r * w;
        for (Py_ssize_t i = 0; i < w; i++)
            dst[i] = src[i] + s->bias[i]; /* p2 += bias; pre[rows] = p2 */
        const float pres = has_ages && isfinite(s->ages[r]) ? 1.0f : 0.0f;
        /* top = p2[:, :2H] + req_top (+ present * req_w[-1, :2H]); dead = max <= -1e-5 */
        float mx = -INFINITY;
        int nan = 0;
        for (Py_ssize_t i = 0; i < h2; i++) {
            float t = dst[i] + s->req_top[i];
            if (has_ages)
                t = t + pres * s->req_age[i];
            nan |= t != t;
            mx = t > mx ? t : mx;
        }
        s->present[r] = pres;
        s->dead[r] = !nan && h2 > 0 && mx <= -1e-5f;
        for (int j = 0; j < 7; j++)
            s->quant[j * n + r] = q[k * 7 + j];
        s->at[r] = tick;
    }
}

#endif
