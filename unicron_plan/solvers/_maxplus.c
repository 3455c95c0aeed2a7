/* Compiled inner loop of the DP: one windowed max-plus fold.
 *
 * new[c - L2] = max_k Vx[c - y_k - L] + g_k  for c in [L2, L2 + W), c - y_k >= L,
 * choice[c - L2] = the first k reaching the max (ties keep the smaller k), exactly as the
 * numpy fallback in dp.py computes it (same additions, same comparisons).
 * Called through ctypes; the module init only makes the file importable to locate it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>

void maxplus_fold(const double *Vx, int64_t L, const int64_t *y, const double *g, int64_t K,
                  int64_t L2, int64_t W, double *out, uint32_t *choice)
{
    for (int64_t c = 0; c < W; c++) {
        out[c] = -INFINITY;
        if (choice) choice[c] = 0;
    }
    for (int64_t k = 0; k < K; k++) {
        int64_t yk = y[k];
        int64_t lo = L2 > L + yk ? L2 : L + yk;
        int64_t hi = L2 + W - 1;
        if (lo > hi) continue;
        const double *src = Vx + (lo - yk - L);
        double *dst = out + (lo - L2);
        double gk = g[k];
        int64_t n = hi - lo + 1;
        if (choice) {
            uint32_t *ch = choice + (lo - L2);
            uint32_t kk = (uint32_t)k;
            for (int64_t i = 0; i < n; i++) {
                double cand = src[i] + gk;
                int better = cand > dst[i];
                dst[i] = better ? cand : dst[i];
                ch[i] = better ? kk : ch[i];
            }
        } else {
            for (int64_t i = 0; i < n; i++) {
                double cand = src[i] + gk;
                dst[i] = cand > dst[i] ? cand : dst[i];
            }
        }
    }
}

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_maxplus",
                                    "Compiled max-plus fold (called through ctypes).", -1, NULL};

PyMODINIT_FUNC PyInit__maxplus(void) { return PyModule_Create(&moddef); }
