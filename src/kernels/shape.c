/* Shape-family kernels: permute, concat, split, slice, slice backward, copies.
 * All are memory-bound row copies; rows are distributed over OpenMP threads, and rows that are
 * few but long are cut into chunks so every thread gets work. */
#include "shape.h"

#include <omp.h>
#include <string.h>

#include "tessera/base.h"

#define PAR_MIN_BYTES ((size_t)1 << 16) /* below this, copying serially is faster */
#define CHUNK_BYTES ((size_t)1 << 16)

/* Copies nrows rows of rowbytes from src (row stride sstride bytes) to dst (stride dstride). */
static void copy_rows(int64_t nrows, size_t rowbytes, const char *src, size_t sstride, char *dst,
                      size_t dstride) {
  if (nrows <= 0 || rowbytes == 0) return;
  size_t total = (size_t)nrows * rowbytes;
  if (total < PAR_MIN_BYTES || omp_get_max_threads() == 1 || omp_in_parallel()) {
    for (int64_t r = 0; r < nrows; r++) memcpy(dst + r * dstride, src + r * sstride, rowbytes);
    return;
  }
  int64_t nchunk = 1;
  if (rowbytes > CHUNK_BYTES && nrows < 8 * (int64_t)omp_get_max_threads())
    nchunk = (int64_t)((rowbytes + CHUNK_BYTES - 1) / CHUNK_BYTES);
  size_t csz = (rowbytes + (size_t)nchunk - 1) / (size_t)nchunk;
  int64_t items = nrows * nchunk;
#pragma omp parallel for schedule(static)
  for (int64_t it = 0; it < items; it++) {
    int64_t r = it / nchunk, c = it % nchunk;
    size_t b0 = (size_t)c * csz;
    if (b0 >= rowbytes) continue;
    size_t nb = rowbytes - b0 < csz ? rowbytes - b0 : csz;
    memcpy(dst + r * dstride + b0, src + r * sstride + b0, nb);
  }
}

int ts__copy_ref(const void *x, void *y, size_t bytes) {
  if (x == y || bytes == 0) return TS_OK;
  copy_rows(1, bytes, x, bytes, y, bytes);
  return TS_OK;
}

int ts__zero_ref(void *y, size_t bytes) {
  if (bytes == 0) return TS_OK;
  if (bytes < PAR_MIN_BYTES || omp_in_parallel()) {
    memset(y, 0, bytes);
    return TS_OK;
  }
  int64_t nchunk = (int64_t)((bytes + CHUNK_BYTES - 1) / CHUNK_BYTES);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nchunk; c++) {
    size_t b0 = (size_t)c * CHUNK_BYTES;
    size_t nb = bytes - b0 < CHUNK_BYTES ? bytes - b0 : CHUNK_BYTES;
    memset((char *)y + b0, 0, nb);
  }
  return TS_OK;
}

/* ---------------------------------------------------------------- permute */

#define TILE 32

/* Tiled 2-D transpose of one (na x nb) block: out[ia*osa + ib] = in[ia + ib*isb]. */
#define DEF_TILE(T)                                                                           \
  static void tile_##T(const T *in, T *out, int64_t a0, int64_t a1, int64_t b0, int64_t b1,   \
                       int64_t isb, int64_t osa) {                                            \
    for (int64_t a = a0; a < a1; a++) {                                                        \
      T *o = out + a * osa;                                                                    \
      const T *i = in + a;                                                                     \
      for (int64_t b = b0; b < b1; b++) o[b] = i[b * isb];                                     \
    }                                                                                          \
  }
DEF_TILE(uint8_t)
DEF_TILE(uint16_t)
DEF_TILE(uint32_t)
DEF_TILE(uint64_t)

static void tile_any(const char *in, char *out, int64_t a0, int64_t a1, int64_t b0, int64_t b1,
                     int64_t isb, int64_t osa, size_t es) {
  for (int64_t a = a0; a < a1; a++)
    for (int64_t b = b0; b < b1; b++)
      memcpy(out + (a * osa + b) * (int64_t)es, in + (a + b * isb) * (int64_t)es, es);
}

int ts__permute_ref(const void *x, void *y, size_t esize, int ndim, const int64_t *dims,
                    const int *perm) {
  if (ndim < 0 || ndim > 8) return ts_error_set(TS_EINVAL, "permute: ndim %d out of range", ndim);
  int64_t istride[8], numel = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    istride[d] = numel;
    numel *= dims[d];
  }
  if (numel == 0) return TS_OK;
  /* Output dims with their input strides; drop size-1 dims, merge dims contiguous in both. */
  int64_t sz[8], st[8];
  int m = 0;
  for (int k = 0; k < ndim; k++) {
    int64_t n = dims[perm[k]], s = istride[perm[k]];
    if (n == 1) continue;
    if (m > 0 && st[m - 1] == s * n) {
      sz[m - 1] *= n;
      st[m - 1] = s;
      continue;
    }
    sz[m] = n;
    st[m] = s;
    m++;
  }
  if (m <= 1) return ts__copy_ref(x, y, (size_t)numel * esize);
  const char *xc = x;
  char *yc = y;
  int64_t ostride[8];
  {
    int64_t s = 1;
    for (int k = m - 1; k >= 0; k--) {
      ostride[k] = s;
      s *= sz[k];
    }
  }
  if (st[m - 1] == 1) {
    /* Inner dim contiguous in both: copy rows of sz[m-1] elements. */
    int64_t rowlen = sz[m - 1], nrows = numel / rowlen;
    size_t rb = (size_t)rowlen * esize;
    int par = (size_t)numel * esize >= PAR_MIN_BYTES && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
    for (int64_t r = 0; r < nrows; r++) {
      int64_t rem = r, off = 0;
      for (int k = m - 2; k >= 0; k--) {
        int64_t ik = rem % sz[k];
        rem /= sz[k];
        off += ik * st[k];
      }
      memcpy(yc + (size_t)r * rb, xc + (size_t)off * esize, rb);
    }
    return TS_OK;
  }
  /* General: the input's stride-1 dim is output dim qa (< m-1); tile over (qa, m-1). */
  int qa = -1;
  for (int k = 0; k < m - 1; k++)
    if (st[k] == 1) qa = k;
  if (qa < 0) return ts_error_set(TS_EINVAL, "permute: internal stride error");
  int64_t na = sz[qa], nb = sz[m - 1], isb = st[m - 1], osa = ostride[qa];
  int64_t ta = (na + TILE - 1) / TILE, tb = (nb + TILE - 1) / TILE;
  int64_t outer = numel / (na * nb);
  int64_t items = outer * ta * tb;
  int par = (size_t)numel * esize >= PAR_MIN_BYTES && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (par)
  for (int64_t it = 0; it < items; it++) {
    int64_t o = it / (ta * tb), t = it % (ta * tb);
    int64_t a0 = (t / tb) * TILE, b0 = (t % tb) * TILE;
    int64_t a1 = a0 + TILE < na ? a0 + TILE : na, b1 = b0 + TILE < nb ? b0 + TILE : nb;
    /* offsets of the outer index over dims other than qa and m-1 */
    int64_t rem = o, ioff = 0, ooff = 0;
    for (int k = m - 2; k >= 0; k--) {
      if (k == qa) continue;
      int64_t ik = rem % sz[k];
      rem /= sz[k];
      ioff += ik * st[k];
      ooff += ik * ostride[k];
    }
    switch (esize) {
      case 1: tile_uint8_t((const uint8_t *)xc + ioff, (uint8_t *)yc + ooff, a0, a1, b0, b1, isb, osa); break;
      case 2: tile_uint16_t((const uint16_t *)xc + ioff, (uint16_t *)yc + ooff, a0, a1, b0, b1, isb, osa); break;
      case 4: tile_uint32_t((const uint32_t *)xc + ioff, (uint32_t *)yc + ooff, a0, a1, b0, b1, isb, osa); break;
      case 8: tile_uint64_t((const uint64_t *)xc + ioff, (uint64_t *)yc + ooff, a0, a1, b0, b1, isb, osa); break;
      default:
        tile_any(xc + ioff * (int64_t)esize, yc + ooff * (int64_t)esize, a0, a1, b0, b1, isb, osa, esize);
    }
  }
  return TS_OK;
}

/* ---------------------------------------------------------------- concat / split / slice */

int ts__concat_ref(const void *const *xs, const int64_t *lens, int n, void *y, size_t esize,
                   int64_t outer, int64_t inner) {
  int64_t tot = 0;
  for (int k = 0; k < n; k++) tot += lens[k];
  size_t ystride = (size_t)(tot * inner) * esize;
  int64_t off = 0;
  for (int k = 0; k < n; k++) {
    size_t rb = (size_t)(lens[k] * inner) * esize;
    copy_rows(outer, rb, xs[k], rb, (char *)y + (size_t)(off * inner) * esize, ystride);
    off += lens[k];
  }
  return TS_OK;
}

int ts__split_ref(const void *x, void *const *ys, const int64_t *lens, int n, size_t esize,
                  int64_t outer, int64_t inner) {
  int64_t tot = 0;
  for (int k = 0; k < n; k++) tot += lens[k];
  size_t xstride = (size_t)(tot * inner) * esize;
  int64_t off = 0;
  for (int k = 0; k < n; k++) {
    size_t rb = (size_t)(lens[k] * inner) * esize;
    if (ys[k]) copy_rows(outer, rb, (const char *)x + (size_t)(off * inner) * esize, xstride, ys[k], rb);
    off += lens[k];
  }
  return TS_OK;
}

int ts__slice_ref(const void *x, void *y, size_t esize, int64_t outer, int64_t len, int64_t inner,
                  int64_t start, int64_t end) {
  if (start < 0 || end > len || start > end)
    return ts_error_set(TS_ERANGE, "slice: [%lld,%lld) out of range for length %lld",
                        (long long)start, (long long)end, (long long)len);
  size_t rb = (size_t)((end - start) * inner) * esize;
  copy_rows(outer, rb, (const char *)x + (size_t)(start * inner) * esize,
            (size_t)(len * inner) * esize, y, rb);
  return TS_OK;
}

int ts__slice_bwd_ref(const void *dy, void *dx, size_t esize, int64_t outer, int64_t len,
                      int64_t inner, int64_t start, int64_t end) {
  if (start < 0 || end > len || start > end)
    return ts_error_set(TS_ERANGE, "slice_bwd: [%lld,%lld) out of range for length %lld",
                        (long long)start, (long long)end, (long long)len);
  size_t rb = (size_t)(len * inner) * esize;
  size_t pre = (size_t)(start * inner) * esize, mid = (size_t)((end - start) * inner) * esize;
  size_t post = rb - pre - mid;
  int par = (size_t)outer * rb >= PAR_MIN_BYTES && !omp_in_parallel();
  if (outer == 1 && par) {
    ts__zero_ref(dx, pre);
    ts__copy_ref(dy, (char *)dx + pre, mid);
    ts__zero_ref((char *)dx + pre + mid, post);
    return TS_OK;
  }
#pragma omp parallel for schedule(static) if (par)
  for (int64_t r = 0; r < outer; r++) {
    char *d = (char *)dx + (size_t)r * rb;
    if (pre) memset(d, 0, pre);
    if (mid) memcpy(d + pre, (const char *)dy + (size_t)r * mid, mid);
    if (post) memset(d + pre + mid, 0, post);
  }
  return TS_OK;
}
