/* 16-bit float conversion helpers for the kernels (see lowp.h). */
#include "lowp.h"

#include "tessera/base.h"

void ts__lp_to_f32(const void *src, ts_dtype dt, float *dst, int64_t n) {
  if (dt == TS_BF16) {
    const uint16_t *s = src;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) dst[i] = ts__bf2f(s[i]);
  } else if (dt == TS_F16) {
    const uint16_t *s = src;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) dst[i] = ts_f16_to_f32(s[i]);
  } else {
    memcpy(dst, src, (size_t)n * sizeof(float));
  }
}

void ts__lp_from_f32(const float *src, void *dst, ts_dtype dt, int64_t n) {
  if (dt == TS_BF16) {
    uint16_t *d = dst;
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) d[i] = ts__f2bf(src[i]);
  } else if (dt == TS_F16) {
    uint16_t *d = dst;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) d[i] = ts_f32_to_f16(src[i]);
  } else {
    memcpy(dst, src, (size_t)n * sizeof(float));
  }
}

float *ts__lp_in(const void *src, ts_dtype dt, int64_t n, const char *what) {
  float *p = ts_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p) {
    ts_error_set(TS_ENOMEM, "%s: out of memory for a %lld-element f32 copy", what, (long long)n);
    return NULL;
  }
  if (src) ts__lp_to_f32(src, dt, p, n);
  return p;
}

void ts__lp_widen(const void *src, ts_dtype dt, float *dst, int64_t n) {
  const uint16_t *s = src;
  if (dt == TS_F32) {
    memcpy(dst, src, (size_t)n * sizeof(float));
  } else if (dt == TS_BF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) dst[i] = ts__bf2f(s[i]);
  } else {
    for (int64_t i = 0; i < n; i++) dst[i] = ts_f16_to_f32(s[i]);
  }
}

void ts__lp_narrow(const float *src, void *dst, ts_dtype dt, int64_t n) {
  uint16_t *d = dst;
  if (dt == TS_F32) {
    memcpy(dst, src, (size_t)n * sizeof(float));
  } else if (dt == TS_BF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) d[i] = ts__f2bf(src[i]);
  } else {
    for (int64_t i = 0; i < n; i++) d[i] = ts_f32_to_f16(src[i]);
  }
}

int ts__lp_stream(int nin, const void *const *in, const ts_dtype *idt, int nout, void *const *out,
                  const ts_dtype *odt, int64_t n, ts__lp_chunk_fn fn, const void *ctx,
                  const char *what) {
  if (nin < 0 || nout < 1 || nin + nout > 4)
    return ts_error_set(TS_EINVAL, "%s: %d inputs and %d outputs (at most 4 buffers)", what, nin, nout);
  const int64_t nch = (n + TS__LP_CHUNK - 1) / TS__LP_CHUNK;
  int bad = 0, code = TS_OK;
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t c = 0; c < nch; c++) {
    float buf[4][TS__LP_CHUNK] __attribute__((aligned(64)));
    float *p[4];
    const int64_t off = c * TS__LP_CHUNK, len = n - off < TS__LP_CHUNK ? n - off : TS__LP_CHUNK;
    for (int k = 0; k < nin; k++) {
      if (idt[k] == TS_F32) {
        p[k] = (float *)in[k] + off;
      } else {
        ts__lp_widen((const uint16_t *)in[k] + off, idt[k], buf[k], len);
        p[k] = buf[k];
      }
    }
    for (int j = 0; j < nout; j++) p[nin + j] = odt[j] == TS_F32 ? (float *)out[j] + off : buf[nin + j];
    const int rc = fn(p, off, len, ctx);
    if (rc != TS_OK) {
#pragma omp atomic write
      code = rc;
#pragma omp atomic write
      bad = 1;
    }
    for (int j = 0; j < nout; j++)
      if (odt[j] != TS_F32) ts__lp_narrow(buf[nin + j], (uint16_t *)out[j] + off, odt[j], len);
  }
  if (bad) return ts_error_set(code, "%s: a chunk failed (status %d)", what, code);
  return TS_OK;
}
