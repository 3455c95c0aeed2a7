/* Plain DP over the same Pareto counts as unicron_plan.solvers.dp, compiled with -O3:
 * the reference of what the hardware allows (no bounds, no windows, full 0..C per job,
 * argmax stored for the backtrack). Built and driven by benchmarks/adversarial_table.py.
 *
 * Input (binary, native endianness): int64 C, int64 m, then per job int64 K, K int64 counts,
 * K float64 gains. Output (text): objective, seconds of the DP itself (excluding reading, wall clock),
 * GPUs used, CPU seconds of the DP.
 *
 * `plain_dp FILE --value-only`: the same loop without the choice table and the backtrack (the optimum's
 * value only, no plan; GPUs used printed as -1): a lower bound of the plain DP's work where its
 * m (C + 1) choice table does not fit in memory (1,048,576 GPUs x 8,192 jobs: 34 GB).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void rd(void *p, size_t sz, size_t n, FILE *f) {
    if (fread(p, sz, n, f) != n) { fprintf(stderr, "short read\n"); exit(2); }
}

int main(int argc, char **argv) {
    FILE *f = argc > 1 ? fopen(argv[1], "rb") : NULL;
    if (!f) return 2;
    int value_only = argc > 2 && strcmp(argv[2], "--value-only") == 0;
    int64_t C, m;
    rd(&C, 8, 1, f); rd(&m, 8, 1, f);
    int64_t **ys = malloc(m * sizeof *ys); double **gs = malloc(m * sizeof *gs);
    int64_t *ks = malloc(m * sizeof *ks);
    for (int64_t j = 0; j < m; j++) {
        rd(&ks[j], 8, 1, f);
        ys[j] = malloc(ks[j] * 8); gs[j] = malloc(ks[j] * 8);
        rd(ys[j], 8, ks[j], f); rd(gs[j], 8, ks[j], f);
    }
    fclose(f);
    struct timespec t0, t1, u0, u1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &u0);
    double *V = malloc((C + 1) * 8), *N = malloc((C + 1) * 8);
    uint32_t **ch = malloc(m * sizeof *ch);
    for (int64_t c = 0; c <= C; c++) V[c] = 0.0;
    for (int64_t j = 0; value_only && j < m; j++) {
        for (int64_t c = 0; c <= C; c++) N[c] = -INFINITY;
        for (int64_t k = 0; k < ks[j]; k++) {
            int64_t y = ys[j][k]; double g = gs[j][k];
            for (int64_t c = y; c <= C; c++) {
                double cand = V[c - y] + g;
                N[c] = cand > N[c] ? cand : N[c];
            }
        }
        double *t = V; V = N; N = t;
    }
    for (int64_t j = 0; !value_only && j < m; j++) {
        ch[j] = calloc(C + 1, 4);
        for (int64_t c = 0; c <= C; c++) N[c] = -INFINITY;
        for (int64_t k = 0; k < ks[j]; k++) {
            int64_t y = ys[j][k]; double g = gs[j][k]; uint32_t *cj = ch[j];
            for (int64_t c = y; c <= C; c++) {
                double cand = V[c - y] + g;
                int b = cand > N[c];
                N[c] = b ? cand : N[c];
                cj[c] = b ? (uint32_t)k : cj[c];
            }
        }
        double *t = V; V = N; N = t;
    }
    int64_t c = C, used = value_only ? -1 : 0;  /* backtrack (part of the work a planner must do) */
    for (int64_t j = m - 1; !value_only && j >= 0; j--) { int64_t y = ys[j][ch[j][c]]; used += y; c -= y; }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &u1);
    printf("%.17g\n%.9f\n%lld\n%.9f\n", V[C], (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec),
           (long long)used, (u1.tv_sec - u0.tv_sec) + 1e-9 * (u1.tv_nsec - u0.tv_nsec));
    return 0;
}
