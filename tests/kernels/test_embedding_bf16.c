/* 16-bit embedding kernels (embedding.c) against the f32 kernels on the same (16-bit
 * representable) values, bf16 and f16, i32 and i64 ids, whole and vocabulary-sharded tables.
 *  - forward: the 16-bit gather moves 2-byte rows: y equals the f32 gather's rows rounded to
 *    the dtype, bit for bit (they are representable, so rounding is exact).
 *  - backward: each row's tokens are summed in f32 in token order, as the f32 kernel sums them,
 *    and rounded once: dtable equals the f32 kernel's dtable rounded, bit for bit; rows never
 *    hit are zero; 1 and N threads agree bitwise. Repeated ids (many tokens per row) and a
 *    vocabulary larger than the tokens (rows never hit) are both covered.
 * Each comparison is also shown to fail on one corrupted element; bad ids give a status. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/embedding.h"
#include "kernels/lowp.h"
#include "test_util.h"

static int64_t ndiff(const uint16_t *out, ts_dtype dt, const float *ref, int64_t n) {
  uint16_t *want = malloc((size_t)n * 2);
  ts__lp_narrow(ref, want, dt, n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad += out[i] != want[i];
  free(want);
  return bad;
}

static void same(uint16_t *out, ts_dtype dt, const float *ref, int64_t n, const char *what) {
  int64_t bad = ndiff(out, dt, ref, n);
  CHECK_MSG(bad == 0, "%s: %lld of %lld elements differ from the rounded f32 result", what, (long long)bad,
            (long long)n);
  out[n / 3] ^= 0x0100;
  CHECK_MSG(ndiff(out, dt, ref, n) == bad + 1, "%s: a corrupted element is not caught", what);
  out[n / 3] ^= 0x0100;
}

/* V rows, N tokens (ids (n * 7919 + 3) % span + lo), D columns; sharded: rows [off, off+V) of a
 * table of span rows. */
static void check(ts_dtype dt, ts_dtype idt, int64_t V, int64_t N, int64_t D, int64_t off, int64_t span) {
  const int sharded = off > 0 || span != V;
  float *tab = malloc((size_t)(V * D) * 4), *dy = malloc((size_t)(N * D) * 4), *y = malloc((size_t)(N * D) * 4),
        *g = malloc((size_t)(V * D) * 4);
  uint16_t *tab16 = malloc((size_t)(V * D) * 2), *dy16 = malloc((size_t)(N * D) * 2),
           *y16 = malloc((size_t)(N * D) * 2), *g16 = malloc((size_t)(V * D) * 2), *g16b = malloc((size_t)(V * D) * 2);
  ts_test_fill(tab, (size_t)(V * D), 3, -1, 1);
  ts_test_fill(dy, (size_t)(N * D), 4, -1, 1);
  ts__lp_narrow(tab, tab16, dt, V * D), ts__lp_widen(tab16, dt, tab, V * D);
  ts__lp_narrow(dy, dy16, dt, N * D), ts__lp_widen(dy16, dt, dy, N * D);
  void *ids = malloc((size_t)N * 8);
  for (int64_t n = 0; n < N; n++) {
    const int64_t id = (n * 7919 + 3) % span;
    if (idt == TS_I32) ((int32_t *)ids)[n] = (int32_t)id;
    else ((int64_t *)ids)[n] = id;
  }
  char what[160];
  snprintf(what, sizeof what, "embedding %s ids %s V%lld N%lld D%lld%s", ts_dtype_name(dt), ts_dtype_name(idt),
           (long long)V, (long long)N, (long long)D, sharded ? " sharded" : "");
  /* forward */
  if (sharded) {
    CHECK_OK(ts__embedding_shard_fwd_ref(tab, 4, V, D, off, ids, idt, N, y));
    CHECK_OK(ts__embedding_shard_fwd_ref(tab16, 2, V, D, off, ids, idt, N, y16));
  } else {
    CHECK_OK(ts__embedding_fwd_ref(tab, 4, V, D, ids, idt, N, y));
    CHECK_OK(ts__embedding_fwd_ref(tab16, 2, V, D, ids, idt, N, y16));
  }
  char w2[200];
  snprintf(w2, sizeof w2, "%s: forward", what);
  same(y16, dt, y, N * D, w2);
  /* backward, on N threads and on 1 */
  memset(g16, 0xff, (size_t)(V * D) * 2);
  if (sharded) {
    CHECK_OK(ts__embedding_shard_bwd_ref(dy, ids, idt, N, V, D, off, g));
    CHECK_OK(ts__embedding_shard_bwd_lp(dt, dy16, ids, idt, N, V, D, off, g16));
  } else {
    CHECK_OK(ts__embedding_bwd_ref(dy, ids, idt, N, V, D, g));
    CHECK_OK(ts__embedding_bwd_lp(dt, dy16, ids, idt, N, V, D, g16));
  }
  snprintf(w2, sizeof w2, "%s: backward", what);
  same(g16, dt, g, V * D, w2);
  const int nt = omp_get_max_threads();
  omp_set_num_threads(1);
  if (sharded) CHECK_OK(ts__embedding_shard_bwd_lp(dt, dy16, ids, idt, N, V, D, off, g16b));
  else CHECK_OK(ts__embedding_bwd_lp(dt, dy16, ids, idt, N, V, D, g16b));
  omp_set_num_threads(nt);
  CHECK_MSG(!memcmp(g16, g16b, (size_t)(V * D) * 2), "%s: 1 and %d threads differ", what, nt);
  free(tab), free(dy), free(y), free(g), free(tab16), free(dy16), free(y16), free(g16), free(g16b), free(ids);
}

int main(void) {
  const ts_dtype dts[2] = {TS_BF16, TS_F16};
  for (int i = 0; i < 2; i++) {
    check(dts[i], TS_I32, 256, 4096, 128, 0, 256);   /* the GPT example: byte vocabulary, 16 tokens a row */
    check(dts[i], TS_I64, 1000, 300, 37, 0, 1000);   /* rows never hit, odd width */
    check(dts[i], TS_I32, 5, 7, 3, 0, 5);            /* small: one thread */
    check(dts[i], TS_I64, 300, 2000, 64, 200, 1000); /* sharded: rows [200,500) of 1000 */
  }
  /* bad ids and dtypes: a status naming the op */
  uint16_t t[8] = {0}, d[8] = {0};
  int32_t bad[2] = {1, 9};
  CHECK(ts__embedding_bwd_lp(TS_BF16, d, bad, TS_I32, 2, 4, 2, t) == TS_ERANGE);
  CHECK_MSG(strstr(ts_last_error(), "embedding_bwd") && strstr(ts_last_error(), "position 1"), "%s", ts_last_error());
  bad[1] = -1;
  CHECK(ts__embedding_shard_bwd_lp(TS_BF16, d, bad, TS_I32, 2, 4, 2, 0, t) == TS_ERANGE);
  CHECK(ts__embedding_bwd_lp(TS_I32, d, bad, TS_I32, 2, 4, 2, t) == TS_EDTYPE);
  return ts_test_finish("test_embedding_bf16");
}
