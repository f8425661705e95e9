/* The ring reduce-scatter and all-gather (src/comm/ring.c). The reduce-scatter against the exact
 * sums and against MPI's reduce-scatter: uneven counts (zero blocks included), in place and out of place, sum and mean,
 * several rings in flight at once on one communicator (their own tags), tested in different
 * orders on different ranks and waited in reverse; sums of small integers, exact in f32, so
 * every order of summation gives the same bits. The all-gather against MPI's allgatherv (blocks
 * with gaps between them, in place and apart, f32 and bf16). The 16-bit reduce-scatter (bf16, f16)
 * against the exact sums and MPI's 16-bit one, and on fractional data within its N - 1 roundings.
 * Refusals (dtype, op). Runs as one process and
 * under mpirun -n 2, 3 and 4. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tessera/comm.h"

/* Element i of rank r's send buffer: small integers (exact sums). */
static float val(int r, size_t i) { return (float)((int)(i % 13) - 6 + 3 * r); }

static void counts_for(int N, size_t n, int variant, size_t *c) {
  for (int r = 0; r < N; r++)
    c[r] = variant == 0 ? n / N + (r < (int)(n % N)) : variant == 1 ? (r % 2 ? 0 : n / N + r) : (size_t)r * n / 3 + 1;
}

/* The ranks' counts (malloc'd), this rank's offset *at in the whole and the whole *tot. */
static size_t *layout(ts_comm *w, size_t n, int variant, size_t *at, size_t *tot) {
  int N = ts_comm_size(w), R = ts_comm_rank(w);
  size_t *c = malloc(sizeof(size_t) * (size_t)N);
  counts_for(N, n, variant, c);
  for (int r = 0; r < N; r++) {
    if (r < R) *at += c[r];
    *tot += c[r];
  }
  return c;
}

static void check_ring(ts_comm *w, size_t n, int variant, int inplace, ts_reduce_op op) {
  int N = ts_comm_size(w), R = ts_comm_rank(w);
  size_t tot = 0, at = 0, *c = layout(w, n, variant, &at, &tot);
  float *s = malloc(sizeof(float) * (tot + 1)), *o = malloc(sizeof(float) * (c[R] + 1)), *m = malloc(sizeof(float) * (c[R] + 1));
  for (size_t i = 0; i < tot; i++) s[i] = val(R, i);
  /* MPI's result first (its buffers apart) */
  CHECK_OK(ts_comm_reduce_scatter(w, s, m, c, TS_F32, op));
  float *dst = inplace ? s + at : o;
  ts_comm_ring_req *q = NULL;
  CHECK_OK(ts_comm_ireduce_scatter_ring(w, s, dst, c, TS_F32, op, 7, &q));
  CHECK_OK(ts_comm_ring_wait(q));
  int done = 0;
  CHECK_OK(ts_comm_ring_test(q, &done));
  CHECK(done);
  ts_comm_ring_req_free(q);
  int bad = 0;
  for (size_t i = 0; i < c[R]; i++) {
    double want = 0;
    for (int r = 0; r < N; r++) want += val(r, at + i);
    if (op == TS_REDUCE_MEAN) want = (float)want * (1.0f / (float)N);
    if (dst[i] != (float)want || (op == TS_REDUCE_SUM && dst[i] != m[i])) bad++;
  }
  if (bad) printf("rank %d: ring reduce-scatter n=%zu variant %d %s %s: %d of %zu wrong\n", R, n, variant,
                  inplace ? "in place" : "out of place", ts_reduce_op_name(op), bad, c[R]);
  CHECK(bad == 0);
  free(s), free(o), free(m), free(c);
}

/* The 16-bit ring reduce-scatter (bf16, f16): small integers (exact in 16 bits at every hop) give
 * the exact sums, and MPI's 16-bit reduce-scatter's bits; fractional data (rounded at each of the
 * N - 1 hops) lies within (N - 1) half-ulps of the whole sum's magnitude of the exact f64 sum. */
static void check_ring16(ts_comm *w, size_t n, int variant, int inplace, ts_reduce_op op, ts_dtype dt) {
  int N = ts_comm_size(w), R = ts_comm_rank(w);
  size_t tot = 0, at = 0, *c = layout(w, n, variant, &at, &tot);
  float *f = malloc(sizeof(float) * (tot + 1)), *g = malloc(sizeof(float) * (c[R] + 1));
  uint16_t *s = malloc(2 * (tot + 1)), *o = malloc(2 * (c[R] + 1)), *m = malloc(2 * (c[R] + 1));
  int bad = 0;
  for (int frac = 0; frac < 2; frac++) {
    for (size_t i = 0; i < tot; i++) f[i] = frac ? val(R, i) * 0.3183f + 0.01f * (float)(i % 7) : val(R, i);
    CHECK_OK(ts_convert(f, TS_F32, s, dt, tot));
    if (!frac) CHECK_OK(ts_comm_reduce_scatter(w, s, m, c, dt, op)); /* MPI's 16-bit one, buffers apart */
    uint16_t *dst = inplace ? s + at : o;
    ts_comm_ring_req *q = NULL;
    CHECK_OK(ts_comm_ireduce_scatter_ring(w, s, dst, c, dt, op, 9, &q));
    CHECK_OK(ts_comm_ring_wait(q));
    ts_comm_ring_req_free(q);
    CHECK_OK(ts_convert(dst, dt, g, TS_F32, c[R]));
    double ulp = dt == TS_BF16 ? 1.0 / 256 : 1.0 / 2048; /* half an ulp, relative: 2^-8 (bf16), 2^-11 (f16) */
    for (size_t i = 0; i < c[R]; i++) {
      double want = 0, mag = 0;
      for (int r = 0; r < N; r++) {
        float x, v = frac ? val(r, at + i) * 0.3183f + 0.01f * (float)((at + i) % 7) : val(r, at + i);
        uint16_t h; /* rank r's element as it travels */
        ts_convert(&v, TS_F32, &h, dt, 1);
        ts_convert(&h, dt, &x, TS_F32, 1);
        want += x, mag += x < 0 ? -x : x;
      }
      if (op == TS_REDUCE_MEAN) want /= N, mag /= N;
      if (!frac) {
        uint16_t wh;
        float wf = op == TS_REDUCE_MEAN ? (float)(want * N) * (1.0f / (float)N) : (float)want;
        ts_convert(&wf, TS_F32, &wh, dt, 1);
        if (dst[i] != wh || (op == TS_REDUCE_SUM && dst[i] != m[i])) bad++;
      } else if (!(fabs(g[i] - want) <= N * ulp * mag + 1e-30)) {
        bad++;
      }
    }
  }
  if (bad) printf("rank %d: %s ring reduce-scatter n=%zu variant %d %s %s: %d of %zu wrong\n", R, ts_dtype_name(dt), n,
                  variant, inplace ? "in place" : "out of place", ts_reduce_op_name(op), bad, 2 * c[R]);
  CHECK(bad == 0);
  free(s), free(o), free(m), free(c), free(f), free(g);
}

/* The ring all-gather: every block at its place (gaps between the blocks untouched), in place or
 * from a separate buffer, f32 and bf16-sized elements, against MPI's allgatherv. */
static void check_gather(ts_comm *w, size_t n, int variant, int inplace, ts_dtype dt) {
  int N = ts_comm_size(w), R = ts_comm_rank(w);
  size_t *c = malloc(sizeof(size_t) * (size_t)N), *dsp = malloc(sizeof(size_t) * (size_t)N), at = 0;
  counts_for(N, n, variant, c);
  for (int r = 0; r < N; r++) dsp[r] = at, at += c[r] + 1; /* a gap of one element after each block */
  size_t es = ts_dtype_size(dt);
  unsigned char *o = malloc(at * es + 1), *m = malloc(at * es + 1), *s = malloc(c[R] * es + 1);
  memset(o, 0xAB, at * es);
  memset(m, 0xAB, at * es);
  for (size_t i = 0; i < c[R] * es; i++) s[i] = (unsigned char)(R * 31 + i * 7);
  CHECK_OK(ts_comm_allgatherv(w, s, m, c, dsp, dt));
  if (inplace) memcpy(o + dsp[R] * es, s, c[R] * es);
  ts_comm_ring_req *q = NULL;
  CHECK_OK(ts_comm_iallgatherv_ring(w, inplace ? o + dsp[R] * es : s, o, c, dsp, dt, 3, &q));
  CHECK_OK(ts_comm_ring_wait(q));
  ts_comm_ring_req_free(q);
  int bad = memcmp(o, m, at * es) != 0;
  for (int r = 0; r < N && !bad; r++)
    for (size_t i = 0; i < c[r] * es; i++) bad |= o[dsp[r] * es + i] != (unsigned char)(r * 31 + i * 7);
  if (bad) printf("rank %d: ring all-gather n=%zu variant %d %s %s wrong\n", R, n, variant, inplace ? "in place" : "apart",
                  ts_dtype_name(dt));
  CHECK(!bad);
  free(o), free(m), free(s), free(c), free(dsp);
}

/* Several rings in flight at once (tags 0..K-1), advanced by tests in a rank-dependent order and
 * waited in reverse. */
static void check_many(ts_comm *w) {
  enum { K = 4 };
  int N = ts_comm_size(w), R = ts_comm_rank(w);
  size_t n = 1000, *c = malloc(sizeof(size_t) * (size_t)N), at = 0;
  counts_for(N, n, 0, c);
  for (int r = 0; r < R; r++) at += c[r];
  float *s[K], *o[K];
  ts_comm_ring_req *q[K];
  for (int k = 0; k < K; k++) {
    s[k] = malloc(sizeof(float) * n);
    o[k] = malloc(sizeof(float) * (c[R] + 1));
    for (size_t i = 0; i < n; i++) s[k][i] = val(R, i) + (float)k;
    CHECK_OK(ts_comm_ireduce_scatter_ring(w, s[k], o[k], c, TS_F32, TS_REDUCE_SUM, k, &q[k]));
  }
  for (int pass = 0; pass < 3; pass++)
    for (int k = 0; k < K; k++) {
      int done = 0;
      CHECK_OK(ts_comm_ring_test(q[(k + R) % K], &done));
    }
  for (int k = K - 1; k >= 0; k--) CHECK_OK(ts_comm_ring_wait(q[k]));
  for (int k = 0; k < K; k++) {
    int bad = 0;
    for (size_t i = 0; i < c[R]; i++) {
      double want = 0;
      for (int r = 0; r < N; r++) want += val(r, at + i) + k;
      bad += o[k][i] != (float)want;
    }
    CHECK(bad == 0);
    ts_comm_ring_req_free(q[k]);
    free(s[k]), free(o[k]);
  }
  free(c);
}

int main(int argc, char **argv) {
  CHECK_OK(ts_comm_init(&argc, &argv));
  ts_comm *w = NULL;
  CHECK_OK(ts_comm_world(&w));
  size_t sizes[] = {1, 7, 1000, 65537};
  for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
    for (int variant = 0; variant < 3; variant++)
      for (int inplace = 0; inplace < 2; inplace++)
        for (int op = 0; op < 2; op++) check_ring(w, sizes[z], variant, inplace, op ? TS_REDUCE_MEAN : TS_REDUCE_SUM);
  for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
    for (int variant = 0; variant < 3; variant++)
      for (int inplace = 0; inplace < 2; inplace++)
        for (int op = 0; op < 2; op++)
          for (int d = 0; d < 2; d++)
            check_ring16(w, sizes[z], variant, inplace, op ? TS_REDUCE_MEAN : TS_REDUCE_SUM, d ? TS_F16 : TS_BF16);
  for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
    for (int variant = 0; variant < 3; variant++)
      for (int inplace = 0; inplace < 2; inplace++)
        for (int d16 = 0; d16 < 2; d16++) check_gather(w, sizes[z], variant, inplace, d16 ? TS_BF16 : TS_F32);
  check_many(w);
  /* refusals: another dtype or op, no request pointer */
  size_t c1[64];
  for (int i = 0; i < 64; i++) c1[i] = 1;
  int32_t h[64];
  ts_comm_ring_req *q = NULL;
  CHECK(ts_comm_ireduce_scatter_ring(w, h, h, c1, TS_I32, TS_REDUCE_SUM, 0, &q) == TS_EDTYPE && !q);
  float f[64];
  CHECK(ts_comm_ireduce_scatter_ring(w, f, f, c1, TS_F32, TS_REDUCE_MAX, 0, &q) == TS_EDTYPE && !q);
  CHECK(ts_comm_ireduce_scatter_ring(w, f, f, c1, TS_F32, TS_REDUCE_SUM, 0, NULL) == TS_EINVAL);
  return ts_test_finish_job("test_ring");
}
