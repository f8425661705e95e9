/* Embedding kernels: gather against direct indexing (i32 and i64 ids, f32 and 2-byte tables);
 * scatter-add backward against a double-precision sum, bitwise identical for 1 and N threads;
 * out-of-range ids and non-integer id dtypes give a status naming the op; the vocabulary-sharded
 * kernels against the whole-table ones. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/embedding.h"
#include "test_util.h"

static void test_forward(void) {
  int64_t V = 50, D = 37, N = 21;
  float *tab = malloc((size_t)(V * D) * 4), *y = malloc((size_t)(N * D) * 4);
  ts_test_fill(tab, (size_t)(V * D), 5, -1, 1);
  int32_t id32[21];
  int64_t id64[21];
  for (int i = 0; i < N; i++) id64[i] = id32[i] = (int32_t)((i * 17 + 3) % V);
  CHECK_OK(ts__embedding_fwd_ref(tab, 4, V, D, id32, TS_I32, N, y));
  int ok = 1;
  for (int i = 0; i < N; i++) ok &= memcmp(y + i * D, tab + id32[i] * D, (size_t)D * 4) == 0;
  CHECK_MSG(ok, "gather i32");
  memset(y, 0, (size_t)(N * D) * 4);
  CHECK_OK(ts__embedding_fwd_ref(tab, 4, V, D, id64, TS_I64, N, y));
  ok = 1;
  for (int i = 0; i < N; i++) ok &= memcmp(y + i * D, tab + id64[i] * D, (size_t)D * 4) == 0;
  CHECK_MSG(ok, "gather i64");
  /* a 2-byte (bf16) table: rows are moved as bytes */
  uint16_t *t16 = (uint16_t *)tab, *y16 = (uint16_t *)y;
  CHECK_OK(ts__embedding_fwd_ref(t16, 2, V, D, id32, TS_I32, N, y16));
  ok = 1;
  for (int i = 0; i < N; i++) ok &= memcmp(y16 + i * D, t16 + id32[i] * D, (size_t)D * 2) == 0;
  CHECK_MSG(ok, "gather 2-byte rows");
  /* bad ids */
  id32[7] = (int32_t)V;
  CHECK(ts__embedding_fwd_ref(tab, 4, V, D, id32, TS_I32, N, y) == TS_ERANGE);
  CHECK_MSG(strstr(ts_last_error(), "embedding") && strstr(ts_last_error(), "position 7"), "%s", ts_last_error());
  id32[7] = -1;
  CHECK(ts__embedding_fwd_ref(tab, 4, V, D, id32, TS_I32, N, y) == TS_ERANGE);
  CHECK(ts__embedding_fwd_ref(tab, 4, V, D, tab, TS_F32, N, y) == TS_EDTYPE);
  CHECK_MSG(strstr(ts_last_error(), "i32 or i64") != NULL, "%s", ts_last_error());
  free(tab);
  free(y);
  printf("embedding forward: i32/i64 ids, 4- and 2-byte rows, bad ids and id dtype rejected\n");
}

static void test_backward(void) {
  int64_t V = 1000, D = 384, N = 4096; /* big enough to run in parallel */
  float *dy = malloc((size_t)(N * D) * 4), *g1 = malloc((size_t)(V * D) * 4),
        *g2 = malloc((size_t)(V * D) * 4), *ref = malloc((size_t)(V * D) * 4);
  double *acc = calloc((size_t)(V * D), sizeof(double));
  int64_t *ids = malloc((size_t)N * 8);
  ts_test_fill(dy, (size_t)(N * D), 9, -1, 1);
  for (int64_t i = 0; i < N; i++) ids[i] = (int64_t)(ts_rng_uniform_at(10, (uint64_t)i) * 300); /* repeats */
  for (int64_t i = 0; i < N; i++)
    for (int64_t c = 0; c < D; c++) acc[ids[i] * D + c] += dy[i * D + c];
  for (int64_t j = 0; j < V * D; j++) ref[j] = (float)acc[j];
  memset(g1, 0xff, (size_t)(V * D) * 4);
  CHECK_OK(ts__embedding_bwd_ref(dy, ids, TS_I64, N, V, D, g1));
  CHECK_CLOSE(g1, ref, (size_t)(V * D), 1e-5, 1e-5, "embedding_bwd vs double sum");
  int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  CHECK_OK(ts__embedding_bwd_ref(dy, ids, TS_I64, N, V, D, g2));
  omp_set_num_threads(nt > 1 ? nt : 2);
  CHECK_MSG(memcmp(g1, g2, (size_t)(V * D) * 4) == 0, "1 thread vs %d threads differ", nt);
  CHECK_OK(ts__embedding_bwd_ref(dy, ids, TS_I64, N, V, D, g2));
  omp_set_num_threads(nt);
  CHECK_MSG(memcmp(g1, g2, (size_t)(V * D) * 4) == 0, "repeat differs");
  /* small D (fewer column groups than threads) and i32 ids */
  int32_t id32[6] = {0, 2, 2, 1, 0, 2};
  float d6[6 * 3], g6[3 * 3];
  for (int i = 0; i < 18; i++) d6[i] = (float)i;
  CHECK_OK(ts__embedding_bwd_ref(d6, id32, TS_I32, 6, 3, 3, g6));
  float e6[9] = {0 + 12, 1 + 13, 2 + 14, 9, 10, 11, 3 + 6 + 15, 4 + 7 + 16, 5 + 8 + 17};
  CHECK(memcmp(g6, e6, sizeof e6) == 0);
  ids[100] = V + 5;
  CHECK(ts__embedding_bwd_ref(dy, ids, TS_I64, N, V, D, g2) == TS_ERANGE);
  CHECK_MSG(strstr(ts_last_error(), "embedding_bwd") != NULL, "%s", ts_last_error());
  free(dy); free(g1); free(g2); free(ref); free(acc); free(ids);
  printf("embedding backward: (%lld ids, %lld x %lld) vs double sum, deterministic over threads\n",
         (long long)N, (long long)V, (long long)D);
}

/* Vocabulary-sharded kernels: 3 shards of a (V,D) table at offsets 0, V/3, 2V/3 against the
 * whole-table kernels (sum of the gathers, rows of the scatter-add), bitwise, in parallel. */
static void test_sharded(void) {
  int64_t V = 600, D = 64, N = 4096, Vl = V / 3;
  float *tab = malloc((size_t)(V * D) * 4), *y = malloc((size_t)(N * D) * 4),
        *ys = malloc((size_t)(N * D) * 4), *sum = calloc((size_t)(N * D), 4),
        *dy = malloc((size_t)(N * D) * 4), *g = malloc((size_t)(V * D) * 4),
        *gs = malloc((size_t)(Vl * D) * 4);
  int32_t *ids = malloc((size_t)N * 4);
  ts_test_fill(tab, (size_t)(V * D), 3, -1, 1);
  ts_test_fill(dy, (size_t)(N * D), 4, -1, 1);
  for (int64_t i = 0; i < N; i++) ids[i] = (int32_t)(ts_rng_uniform_at(11, (uint64_t)i) * V);
  CHECK_OK(ts__embedding_fwd_ref(tab, 4, V, D, ids, TS_I32, N, y));
  CHECK_OK(ts__embedding_bwd_ref(dy, ids, TS_I32, N, V, D, g));
  int rows_ok = 1, grad_ok = 1;
  for (int q = 0; q < 3; q++) {
    const int64_t off = q * Vl;
    memset(ys, 0xff, (size_t)(N * D) * 4);
    CHECK_OK(ts__embedding_shard_fwd_ref(tab + off * D, 4, Vl, D, off, ids, TS_I32, N, ys));
    for (int64_t i = 0; i < N; i++) {
      const int in = ids[i] >= off && ids[i] < off + Vl;
      for (int64_t c = 0; c < D; c++) {
        rows_ok &= ys[i * D + c] == (in ? y[i * D + c] : 0.0f);
        sum[i * D + c] += ys[i * D + c];
      }
    }
    CHECK_OK(ts__embedding_shard_bwd_ref(dy, ids, TS_I32, N, Vl, D, off, gs));
    grad_ok &= memcmp(gs, g + off * D, (size_t)(Vl * D) * 4) == 0;
  }
  CHECK_MSG(rows_ok, "sharded gather: the table's rows in range, zeros elsewhere");
  CHECK_MSG(memcmp(sum, y, (size_t)(N * D) * 4) == 0, "the sum of the shards is not the full gather");
  CHECK_MSG(grad_ok, "sharded scatter-add: not the rows of the full one");
  /* no upper bound, negative ids and offsets rejected */
  int64_t big[3] = {5, 1000000, 2};
  CHECK_OK(ts__embedding_shard_fwd_ref(tab, 4, 4, D, 2, big, TS_I64, 3, ys));
  CHECK(ys[0] == tab[3 * D] && ys[D] == 0.0f && ys[2 * D] == tab[0]);
  big[1] = -7;
  CHECK(ts__embedding_shard_fwd_ref(tab, 4, 4, D, 2, big, TS_I64, 3, ys) == TS_ERANGE);
  CHECK_MSG(strstr(ts_last_error(), "id -7 at position 1") != NULL, "%s", ts_last_error());
  CHECK(ts__embedding_shard_bwd_ref(dy, big, TS_I64, 3, 4, D, 2, gs) == TS_ERANGE);
  CHECK_MSG(strstr(ts_last_error(), "embedding_bwd") != NULL, "%s", ts_last_error());
  CHECK(ts__embedding_shard_fwd_ref(tab, 4, 4, D, -1, ids, TS_I32, 3, ys) == TS_EINVAL);
  free(tab); free(y); free(ys); free(sum); free(dy); free(g); free(gs); free(ids);
  printf("embedding sharded: 3 shards of (%lld x %lld), %lld ids, against the whole-table kernels\n",
         (long long)V, (long long)D, (long long)N);
}

int main(void) {
  test_forward();
  test_backward();
  test_sharded();
  return ts_test_finish("test_embedding");
}
