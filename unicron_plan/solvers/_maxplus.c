/* Compiled inner loops of the DP: one windowed max-plus fold, one whole pruned pass, and the
 * dominance pruning of every job's options, their envelopes and their search keys.
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
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FOLD_BLOCK 1024 /* capacities per block: the block's values and choices stay in L1 */
#define FOLD_GROUP 4     /* options folded together: each cell is read and written once per group */
#define FOLD_CHUNK_CELLS (1 << 22) /* cell updates between two looks at the deadline in a pass */

/* The fold, blocked over capacities and over groups of options, without branches in the inner loops
 * (the compiler vectorises them). Within a block, the options are applied in their order k to every
 * cell, so every cell sees the same additions and comparisons in the same order as the plain loop
 * (ties keep the smaller k): the values and choices are identical. Choices are carried as doubles
 * inside a block so that values and choices share one comparison mask. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
/* One copy per vector width, picked at load time by the CPU (same arithmetic in each: IEEE
 * additions and comparisons, no fused or reordered operations). */
#define FOLD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FOLD_CLONES
#endif

FOLD_CLONES
void maxplus_fold(const double *Vx, int64_t L, const int64_t *y, const double *g, int64_t K,
                  int64_t L2, int64_t W, double *out, uint32_t *choice)
{
    double cd[FOLD_BLOCK];
    for (int64_t b0 = 0; b0 < W; b0 += FOLD_BLOCK) {
        int64_t b1 = b0 + FOLD_BLOCK < W ? b0 + FOLD_BLOCK : W;
        double *restrict dst = out + b0;
        int64_t n = b1 - b0;
        for (int64_t i = 0; i < n; i++) { dst[i] = -INFINITY; cd[i] = 0.0; }
        int64_t k = 0;
        for (; k < K; k += FOLD_GROUP) {
            int64_t q_n = K - k < FOLD_GROUP ? K - k : FOLD_GROUP;
            const double *src[FOLD_GROUP];
            double gq[FOLD_GROUP], kq[FOLD_GROUP];
            int64_t first[FOLD_GROUP], common = 0;
            for (int64_t q = 0; q < q_n; q++) {
                int64_t yk = y[k + q];
                /* cell i of the block is capacity L2 + b0 + i; option valid when that - yk >= L */
                int64_t f = L + yk - L2 - b0;
                first[q] = f < 0 ? 0 : (f > n ? n : f);
                if (first[q] > common) common = first[q];
                src[q] = Vx + (L2 + b0 - yk - L);
                gq[q] = g[k + q];
                kq[q] = (double)(k + q);
            }
            if (q_n < FOLD_GROUP || common > 0) {
                /* edges: each option over its own cells, in order (the per-cell order is kept) */
                int64_t top = q_n < FOLD_GROUP ? n : common;
                for (int64_t q = 0; q < q_n; q++) {
                    const double *sq = src[q];
                    double gk = gq[q], kk = kq[q];
                    for (int64_t i = first[q]; i < top; i++) {
                        double cand = sq[i] + gk;
                        int better = cand > dst[i];
                        dst[i] = better ? cand : dst[i];
                        cd[i] = better ? kk : cd[i];
                    }
                }
                if (q_n < FOLD_GROUP) break;
            }
            const double *restrict s0 = src[0], *restrict s1 = src[1], *restrict s2 = src[2], *restrict s3 = src[3];
            double g0 = gq[0], g1 = gq[1], g2 = gq[2], g3 = gq[3];
            double k0 = kq[0], k1 = kq[1], k2 = kq[2], k3 = kq[3];
            for (int64_t i = common; i < n; i++) {
                double d = dst[i], c = cd[i], v;
                v = s0[i] + g0; c = v > d ? k0 : c; d = v > d ? v : d;
                v = s1[i] + g1; c = v > d ? k1 : c; d = v > d ? v : d;
                v = s2[i] + g2; c = v > d ? k2 : c; d = v > d ? v : d;
                v = s3[i] + g3; c = v > d ? k3 : c; d = v > d ? v : d;
                dst[i] = d;
                cd[i] = c;
            }
        }
        if (choice)
            for (int64_t i = 0; i < n; i++) choice[b0 + i] = (uint32_t)cd[i];
    }
}

static double now_monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void put_choice(void *buf, int csize, int64_t i, uint32_t v)
{
    if (csize == 1) ((uint8_t *)buf)[i] = (uint8_t)v;
    else if (csize == 2) ((uint16_t *)buf)[i] = (uint16_t)v;
    else ((uint32_t *)buf)[i] = v;
}

static uint32_t get_choice(const void *buf, int csize, int64_t i)
{
    if (csize == 1) return ((const uint8_t *)buf)[i];
    if (csize == 2) return ((const uint16_t *)buf)[i];
    return ((const uint32_t *)buf)[i];
}

/* The counts of the plan ending at capacity ``c`` of the last window of a pass (maxplus_pass's
 * windows ``win`` and choices, stored window after window): result[j] = job j's count. */
void maxplus_back(int64_t m, const int64_t *off, const int64_t *y, const void *choice, int64_t csize,
                  const int64_t *win, int64_t c, int64_t *result)
{
    int64_t start = 0;  /* where job j's choices begin: after every earlier window's */
    for (int64_t j = 0; j < m; j++) start += win[2 * j + 1] - win[2 * j] + 1;
    for (int64_t j = m - 1; j >= 0; j--) {
        int64_t Lj = win[2 * j], Uj = win[2 * j + 1];
        start -= Uj - Lj + 1;
        if (c > Uj) c = Uj;
        int64_t yk = y[off[j] + get_choice(choice, (int)csize, start + c - Lj)];
        result[j] = yk;
        int64_t prevU = j ? win[2 * j - 1] : 0;
        c = c - yk < prevU ? c - yk : prevU;
    }
}

/* One whole pass of the pruned DP (dp._attempt with the choices kept in memory): for every job j
 * in order, fold its kept options (y[off[j]:off[j+1]], g[...]) into the window [L, U] of the best
 * values per used capacity, narrow the new window to [L + lo[j], min(U + hi[j], capacity - after_lo[j])]
 * and, with ``cut``, to the capacities whose Lagrangian bound
 * new[c] + lam * (capacity - c) + after_m[j] still reaches ``threshold``. Then backtrack the counts.
 * The same additions and comparisons as the Python loop in dp.py, so the results are identical.
 * ``choice`` holds ``choice_cap`` entries of ``csize`` bytes (1, 2 or 4); ``win`` gets (L, U) per job.
 * ``deadline``: a CLOCK_MONOTONIC instant (time.perf_counter's clock), checked before each job; < 0: none.
 * ``last``: NULL, or room for capacity + 1 values: the last window's values are copied there and no
 * backtrack is made (the caller picks the capacity to backtrack from: maxplus_back).
 * Returns 0 (result and *value set, or ``last`` filled), 1 (no plan reaches the threshold), 2 (deadline
 * passed), 3 (choice buffer too small), 4 (out of memory).
 */
int64_t maxplus_pass(int64_t m, const int64_t *off, const int64_t *y, const double *g,
                     const int64_t *lo, const int64_t *hi, const int64_t *after_lo, const double *after_m,
                     double lam, int64_t capacity, double threshold, int64_t cut, double deadline,
                     void *choice, int64_t choice_cap, int64_t csize, int64_t *win,
                     int64_t *result, double *value, double *last)
{
    int64_t n = capacity + 2;
    double *V = malloc(sizeof(double) * n), *Vx = malloc(sizeof(double) * n), *nw = malloc(sizeof(double) * n);
    uint32_t *ch = malloc(sizeof(uint32_t) * n);
    int64_t status = 0, used = 0, L = 0, U = 0;
    if (!V || !Vx || !nw || !ch) { status = 4; goto done; }
    V[0] = 0.0;
    for (int64_t j = 0; j < m; j++) {
        if (deadline >= 0 && now_monotonic() >= deadline) { status = 2; goto done; }
        const int64_t *yj = y + off[j];
        const double *gj = g + off[j];
        int64_t K = off[j + 1] - off[j];
        int64_t L2 = L + lo[j];
        int64_t U2 = U + hi[j];
        if (capacity - after_lo[j] < U2) U2 = capacity - after_lo[j];
        if (U2 < L2) { status = 1; goto done; }
        int64_t W = U2 - L2 + 1;
        /* Vx: V extended with V[U] up to U2 - y[0] */
        int64_t need_top = U2 - yj[0];
        int64_t width = U - L + 1;
        int64_t xlen = need_top > U ? need_top - L + 1 : width;
        memcpy(Vx, V, sizeof(double) * width);
        for (int64_t i = width; i < xlen; i++) Vx[i] = V[width - 1];
        /* In chunks of capacities of about FOLD_CHUNK_CELLS cell updates, the deadline checked between
         * them: a fold of a wide window with many options stops within a few milliseconds of it. */
        int64_t chunk = K > 0 ? FOLD_CHUNK_CELLS / K : W;
        chunk = chunk < FOLD_BLOCK ? FOLD_BLOCK : chunk / FOLD_BLOCK * FOLD_BLOCK;
        for (int64_t c0 = 0; c0 < W; c0 += chunk) {
            if (c0 > 0 && deadline >= 0 && now_monotonic() >= deadline) { status = 2; goto done; }
            maxplus_fold(Vx, L, yj, gj, K, L2 + c0, W - c0 < chunk ? W - c0 : chunk, nw + c0, ch + c0);
        }
        int64_t a = 0, b = W - 1;
        if (cut) {
            double am = after_m[j];
            while (a < W && !((nw[a] + lam * (double)(capacity - (L2 + a))) + am >= threshold)) a++;
            if (a == W) { status = 1; goto done; }
            while (!((nw[b] + lam * (double)(capacity - (L2 + b))) + am >= threshold)) b--;
        }
        if (used + (b - a + 1) > choice_cap) { status = 3; goto done; }
        for (int64_t i = a; i <= b; i++) put_choice(choice, (int)csize, used + i - a, ch[i]);
        used += b - a + 1;
        memcpy(V, nw + a, sizeof(double) * (b - a + 1));
        L = L2 + a;
        U = L2 + b;
        win[2 * j] = L;
        win[2 * j + 1] = U;
    }
    if (last) {
        memcpy(last, V, sizeof(double) * (U - L + 1));
    } else {
        int64_t best = 0;
        for (int64_t i = 1; i <= U - L; i++)
            if (V[i] > V[best]) best = i;
        *value = V[best];
        maxplus_back(m, off, y, choice, csize, win, L + best, result);
    }
done:
    free(V); free(Vx); free(nw); free(ch);
    return status;
}

/* Exact dominance pruning of every job at once: job j's gains are g[off[j]:off[j+1]] (count 0 first,
 * counts ascending); keep[i] = 1 for each job's first entry and for every entry whose gain beats the
 * largest gain before it in its job (the comparisons of dp.pareto_arrays). */
void pareto_keep(int64_t m, const int64_t *off, const double *g, uint8_t *keep)
{
    for (int64_t j = 0; j < m; j++) {
        int64_t a = off[j], b = off[j + 1];
        if (a >= b) continue;
        double best = g[a];
        keep[a] = 1;
        for (int64_t i = a + 1; i < b; i++) {
            keep[i] = g[i] > best;
            if (g[i] > best) best = g[i];
        }
    }
}

/* Concave envelope of every job's points (job j's at off[j]..off[j+1]-1, y ascending) by the
   monotone chain: keep[i] = 1 for its vertices (keep zeroed by the caller; stack: scratch of n
   entries). A point on or below the chord of its neighbours is dropped, as in dp._upper_hull_loop,
   with the same arithmetic. */
void upper_hull_keep(int64_t m, const int64_t *off, const int64_t *y, const double *g, int64_t *stack,
                     uint8_t *keep)
{
    for (int64_t j = 0; j < m; j++) {
        int64_t top = 0;
        for (int64_t i = off[j]; i < off[j + 1]; i++) {
            while (top >= 2) {
                int64_t p = stack[top - 1], q = stack[top - 2];
                if ((g[p] - g[q]) * (double)(y[i] - y[p]) <= (g[i] - g[p]) * (double)(y[p] - y[q]))
                    top--;
                else
                    break;
            }
            stack[top++] = i;
        }
        for (int64_t k = 0; k < top; k++)
            keep[stack[k]] = 1;
    }
}

/* Search keys of every job's options (job j's at off[j]..off[j+1]-1): key[i] = j (capacity + 2) +
   min(y[i], capacity + 1), in one pass without temporaries (the int64 values of dp._option_key). */
void option_key(int64_t m, const int64_t *off, const int64_t *y, int64_t capacity, int64_t *key)
{
    const int64_t top = capacity + 1, width = capacity + 2;
    for (int64_t j = 0; j < m; j++) {
        const int64_t base = j * width;
        for (int64_t i = off[j]; i < off[j + 1]; i++)
            key[i] = base + (y[i] < top ? y[i] : top);
    }
}

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_maxplus",
                                    "Compiled max-plus fold (called through ctypes).", -1, NULL};

PyMODINIT_FUNC PyInit__maxplus(void) { return PyModule_Create(&moddef); }
