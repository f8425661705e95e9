/* Shape and misc kernels against naive index-mapping references: permute (every code path:
 * merged dims, contiguous inner rows, tiled transposes; element sizes 1,2,4,8 and an odd size),
 * concat/split round trips, slice and its zero-padding backward, fill and dtype casts. */
#include <stdlib.h>
#include <string.h>

#include "kernels/misc.h"
#include "kernels/shape.h"
#include "test_util.h"

static uint64_t rng_state = 12345;
static uint32_t rnd(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rng_state >> 33);
}

static void fill_bytes(unsigned char *p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(ts_philox4x32(seed, 1, i).v[0]);
}

/* naive permute: walk the output, map each index back to the input */
static void permute_naive(const unsigned char *x, unsigned char *y, size_t es, int nd,
                          const int64_t *dims, const int *perm) {
  int64_t istr[8], odims[8], numel = 1;
  for (int d = nd - 1; d >= 0; d--) {
    istr[d] = numel;
    numel *= dims[d];
  }
  for (int k = 0; k < nd; k++) odims[k] = dims[perm[k]];
  for (int64_t o = 0; o < numel; o++) {
    int64_t rem = o, off = 0;
    for (int k = nd - 1; k >= 0; k--) {
      off += (rem % odims[k]) * istr[perm[k]];
      rem /= odims[k];
    }
    memcpy(y + o * es, x + off * es, es);
  }
}

static int check_permute(int nd, const int64_t *dims, const int *perm, size_t es) {
  int64_t numel = 1;
  for (int d = 0; d < nd; d++) numel *= dims[d];
  size_t bytes = (size_t)numel * es;
  unsigned char *x = malloc(bytes + 1), *y = malloc(bytes + 1), *r = malloc(bytes + 1);
  fill_bytes(x, bytes, (uint64_t)numel * 7 + es);
  memset(y, 0xAB, bytes);
  permute_naive(x, r, es, nd, dims, perm);
  int rc = ts__permute_ref(x, y, es, nd, dims, perm);
  int ok = rc == TS_OK && memcmp(y, r, bytes) == 0;
  free(x);
  free(y);
  free(r);
  return ok;
}

static void test_permute(void) {
  struct { int nd; int64_t dims[6]; int perm[6]; } cases[] = {
      {2, {37, 53}, {1, 0}},                         /* plain transpose (tiled path) */
      {4, {2, 33, 6, 64}, {0, 2, 1, 3}},             /* (B,T,H,D) -> (B,H,T,D): inner rows */
      {4, {3, 5, 7, 9}, {3, 2, 1, 0}},               /* full reversal */
      {3, {4, 1, 5}, {1, 2, 0}},                     /* size-1 dims dropped */
      {4, {2, 3, 4, 5}, {2, 3, 0, 1}},               /* merges to a 2-D transpose */
      {5, {2, 3, 4, 5, 6}, {0, 4, 2, 1, 3}},         /* general tiled with outer dims */
      {3, {1, 1, 1}, {2, 0, 1}},                     /* scalar-like */
      {3, {64, 130, 33}, {2, 0, 1}},                 /* big enough to run in parallel */
      {4, {8, 256, 6, 64}, {0, 2, 1, 3}},            /* the GPT head split */
  };
  size_t sizes[] = {1, 2, 4, 8, 3};
  int ncase = (int)(sizeof cases / sizeof cases[0]);
  for (int c = 0; c < ncase; c++)
    for (int s = 0; s < 5; s++)
      CHECK_MSG(check_permute(cases[c].nd, cases[c].dims, cases[c].perm, sizes[s]),
                "permute case %d esize %zu", c, sizes[s]);
  /* random permutations of random small shapes */
  for (int t = 0; t < 60; t++) {
    int nd = 1 + (int)(rnd() % 6);
    int64_t dims[6];
    int perm[6];
    for (int d = 0; d < nd; d++) {
      dims[d] = 1 + rnd() % 9;
      perm[d] = d;
    }
    for (int d = nd - 1; d > 0; d--) {
      int j = (int)(rnd() % (uint32_t)(d + 1)), tmp = perm[d];
      perm[d] = perm[j];
      perm[j] = tmp;
    }
    size_t es = sizes[rnd() % 4];
    CHECK_MSG(check_permute(nd, dims, perm, es), "random permute %d (nd %d)", t, nd);
  }
  printf("permute: 45 fixed cases, 60 random cases vs naive index mapping\n");
}

static void test_concat_split_slice(void) {
  for (int t = 0; t < 30; t++) {
    int n = 1 + (int)(rnd() % 5);
    int64_t outer = 1 + rnd() % 7, inner = 1 + rnd() % 9, lens[5], tot = 0;
    if (t == 29) { outer = 3; inner = 20000; } /* large rows: chunked parallel copies */
    size_t es = (size_t[]){1, 2, 4, 8}[rnd() % 4];
    unsigned char *xs[5];
    for (int k = 0; k < n; k++) {
      lens[k] = 1 + rnd() % 6;
      tot += lens[k];
      xs[k] = malloc((size_t)(outer * lens[k] * inner) * es);
      fill_bytes(xs[k], (size_t)(outer * lens[k] * inner) * es, (uint64_t)(t * 10 + k));
    }
    size_t ybytes = (size_t)(outer * tot * inner) * es;
    unsigned char *y = malloc(ybytes), *r = malloc(ybytes);
    /* naive concat */
    for (int64_t o = 0; o < outer; o++) {
      int64_t off = 0;
      for (int k = 0; k < n; k++) {
        size_t rb = (size_t)(lens[k] * inner) * es;
        memcpy(r + (size_t)((o * tot + off) * inner) * es, xs[k] + o * rb, rb);
        off += lens[k];
      }
    }
    CHECK_OK(ts__concat_ref((const void *const *)xs, lens, n, y, es, outer, inner));
    CHECK_MSG(memcmp(y, r, ybytes) == 0, "concat case %d", t);
    /* split back */
    void *ys[5];
    for (int k = 0; k < n; k++) ys[k] = malloc((size_t)(outer * lens[k] * inner) * es);
    CHECK_OK(ts__split_ref(y, ys, lens, n, es, outer, inner));
    for (int k = 0; k < n; k++) {
      CHECK_MSG(memcmp(ys[k], xs[k], (size_t)(outer * lens[k] * inner) * es) == 0, "split case %d part %d", t, k);
      free(ys[k]);
      free(xs[k]);
    }
    /* slice [a,b) of y along the middle dim, then its backward */
    int64_t a = rnd() % tot, b = a + 1 + rnd() % (uint64_t)(tot - a);
    size_t sb = (size_t)(outer * (b - a) * inner) * es;
    unsigned char *s = malloc(sb), *dx = malloc(ybytes);
    CHECK_OK(ts__slice_ref(y, s, es, outer, tot, inner, a, b));
    int ok = 1;
    for (int64_t o = 0; o < outer; o++)
      ok &= memcmp(s + (size_t)(o * (b - a) * inner) * es, y + (size_t)((o * tot + a) * inner) * es,
                   (size_t)((b - a) * inner) * es) == 0;
    CHECK_MSG(ok, "slice case %d [%lld,%lld)", t, (long long)a, (long long)b);
    memset(dx, 0x5A, ybytes);
    CHECK_OK(ts__slice_bwd_ref(s, dx, es, outer, tot, inner, a, b));
    ok = 1;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t l = 0; l < tot; l++) {
        const unsigned char *got = dx + (size_t)((o * tot + l) * inner) * es;
        size_t rb = (size_t)inner * es;
        if (l >= a && l < b) {
          ok &= memcmp(got, y + (size_t)((o * tot + l) * inner) * es, rb) == 0;
        } else {
          for (size_t q = 0; q < rb; q++) ok &= got[q] == 0;
        }
      }
    CHECK_MSG(ok, "slice_bwd case %d", t);
    free(s);
    free(dx);
    free(y);
    free(r);
  }
  /* out of range slices are rejected with a message */
  float x[6] = {0}, y[6];
  CHECK(ts__slice_ref(x, y, 4, 1, 6, 1, 4, 7) == TS_ERANGE);
  CHECK_MSG(strstr(ts_last_error(), "slice") != NULL, "%s", ts_last_error());
  printf("concat/split/slice/slice_bwd: 30 random cases vs naive copies, range errors\n");
}

static void test_fill_cast(void) {
  size_t n = 100003; /* parallel, odd */
  float *f = malloc(n * 4), *g = malloc(n * 4);
  uint16_t *h = malloc(n * 2);
  int32_t *i32 = malloc(n * 4);
  int64_t *i64 = malloc(n * 8);
  CHECK_OK(ts__fill_ref(f, TS_F32, n, 2.5f));
  int ok = 1;
  for (size_t i = 0; i < n; i++) ok &= f[i] == 2.5f;
  CHECK_MSG(ok, "fill f32");
  CHECK_OK(ts__fill_ref(f, TS_F32, n, 0.0f));
  ok = 1;
  for (size_t i = 0; i < n; i++) ok &= f[i] == 0.0f;
  CHECK_MSG(ok, "fill zero");
  CHECK_OK(ts__fill_ref(h, TS_BF16, n, 1.5f));
  ok = 1;
  for (size_t i = 0; i < n; i++) ok &= h[i] == ts_f32_to_bf16(1.5f);
  CHECK_MSG(ok, "fill bf16");
  CHECK_OK(ts__fill_ref(i64, TS_I64, n, -7.9f));
  ok = 1;
  for (size_t i = 0; i < n; i++) ok &= i64[i] == -7;
  CHECK_MSG(ok, "fill i64 truncates");
  unsigned char u8[5];
  CHECK_OK(ts__fill_ref(u8, TS_U8, 5, 300.0f));
  CHECK(u8[0] == 255 && u8[4] == 255);

  ts_test_fill(f, n, 77, -1e3f, 1e3f);
  f[0] = INFINITY; f[1] = -INFINITY; f[2] = NAN; f[3] = 1e-40f; f[4] = -0.0f;
  CHECK_OK(ts__cast_ref(f, TS_F32, h, TS_BF16, n));
  ok = 1;
  for (size_t i = 0; i < n; i++) ok &= h[i] == ts_f32_to_bf16(f[i]);
  CHECK_MSG(ok, "cast f32->bf16 matches ts_f32_to_bf16");
  CHECK_OK(ts__cast_ref(h, TS_BF16, g, TS_F32, n));
  ok = 1;
  for (size_t i = 5; i < n; i++) ok &= g[i] == ts_bf16_to_f32(h[i]);
  CHECK_MSG(ok, "cast bf16->f32");
  CHECK_OK(ts__cast_ref(f + 5, TS_F32, h, TS_F16, n - 5));
  ok = 1;
  for (size_t i = 0; i < n - 5; i++) ok &= h[i] == ts_f32_to_f16(f[i + 5]);
  CHECK_MSG(ok, "cast f32->f16");
  CHECK_OK(ts__cast_ref(f + 5, TS_F32, i32, TS_I32, n - 5));
  ok = 1;
  for (size_t i = 0; i < n - 5; i++) ok &= i32[i] == (int32_t)f[i + 5];
  CHECK_MSG(ok, "cast f32->i32 truncates");
  CHECK_OK(ts__cast_ref(i32, TS_I32, i64, TS_I64, n - 5));
  ok = 1;
  for (size_t i = 0; i < n - 5; i++) ok &= i64[i] == i32[i];
  CHECK_MSG(ok, "cast i32->i64");
  CHECK(ts__cast_ref(f, (ts_dtype)42, g, TS_F32, 4) == TS_EDTYPE);
  free(f); free(g); free(h); free(i32); free(i64);
  printf("fill (f32, zero, bf16, i64, u8 saturating) and casts (f32<->bf16, f16, i32, i64)\n");
}

int main(void) {
  test_permute();
  test_concat_split_slice();
  test_fill_cast();
  return ts_test_finish("test_shape");
}
