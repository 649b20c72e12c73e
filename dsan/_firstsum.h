/* The first layer of a few class rows: the C twin of dsan.model.classrows.first_py (read
 * that first). Included by dsan/_classrows.c.
 *
 * Why it stays exact: out[i, j] is x[i, 0] * w[0, j], then + x[i, k] * w[k, j] for k = 1,
 * 2, ... in that order, each product and each sum rounded to float32 (-ffp-contract=off:
 * no fused multiply-adds), which is what numpy's float32 multiply and add.accumulate
 * compute. The columns are taken eight at a time so that the compiler can keep them in
 * vector registers: each column's sum still runs over k in order.
 */
#ifndef DSAN_FIRSTSUM_H
#define DSAN_FIRSTSUM_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define FIRST_BLOCK 8

/* out[i * k + j] for rows i < m and columns c0 <= j < k, from x (m, f) and w (f, k), f >= 1.
 * Cloned for AVX2 (picked at load time where the CPU has it; no "fma" target, so the
 * clones give the same bits), as dsan/_headrows.h's mlp_row. */
__attribute__((optimize("O3"), target_clones("avx2", "default"))) static void first_sum(const float *x, Py_ssize_t m, Py_ssize_t f, const float *w,
                      Py_ssize_t k, Py_ssize_t c0, float *out)
{
    for (Py_ssize_t i = 0; i < m; i++) {
        const float *xi = x + i * f;
        float *oi = out + i * k;
        Py_ssize_t j = c0;
        for (; j + FIRST_BLOCK <= k; j += FIRST_BLOCK) {
            float v[FIRST_BLOCK]; /* a local block: no aliasing, so it can live in registers */
            for (int b = 0; b < FIRST_BLOCK; b++)
                v[b] = xi[0] * w[j + b];
            for (Py_ssize_t t = 1; t < f; t++) {
                const float xt = xi[t];
                const float *wt = w + t * k + j;
                for (int b = 0; b < FIRST_BLOCK; b++)
                    v[b] = v[b] + xt * wt[b];
            }
            for (int b = 0; b < FIRST_BLOCK; b++)
                oi[j + b] = v[b];
        }
        for (; j < k; j++) {
            float v = xi[0] * w[j];
            for (Py_ssize_t t = 1; t < f; t++)
                v = v + xi[t] * w[t * k + j];
            oi[j] = v;
        }
    }
}

#endif
