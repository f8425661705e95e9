/* Reference 2-D convolution kernels (see conv.h). Direct loops, OpenMP over independent output
 * planes; the valid output range of each kernel tap is computed up front so the inner loops
 * have no bounds tests. The weight gradient accumulates in double. */
#include "conv.h"

#include <stdlib.h>
#include <string.h>

#include "tessera/base.h"
#include "ksum.h"

int64_t ts__conv_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  if (s < 1 || d < 1 || k < 1 || p < 0) return 0;
  int64_t span = d * (k - 1) + 1;
  int64_t num = in + 2 * p - span;
  if (num < 0) return 0;
  return num / s + 1;
}

int ts__conv_check(const ts__conv_desc *d, const char *what) {
  if (!d) return ts_error_set(TS_EINVAL, "%s: NULL descriptor", what);
  if (d->N < 1 || d->C < 1 || d->H < 1 || d->W < 1 || d->O < 1 || d->KH < 1 || d->KW < 1 ||
      d->sh < 1 || d->sw < 1 || d->dh < 1 || d->dw < 1 || d->ph < 0 || d->pw < 0 ||
      d->groups < 1)
    return ts_error_set(TS_EINVAL, "%s: invalid sizes or attributes", what);
  if (d->C % d->groups || d->O % d->groups)
    return ts_error_set(TS_EINVAL, "%s: groups %lld do not divide C=%lld and O=%lld", what,
                        (long long)d->groups, (long long)d->C, (long long)d->O);
  if (d->OH != ts__conv_out_size(d->H, d->KH, d->sh, d->ph, d->dh) ||
      d->OW != ts__conv_out_size(d->W, d->KW, d->sw, d->pw, d->dw) || d->OH < 1 || d->OW < 1)
    return ts_error_set(TS_EINVAL, "%s: output size %lldx%lld inconsistent with input", what,
                        (long long)d->OH, (long long)d->OW);
  return TS_OK;
}

/* Output positions o in [lo, hi) whose input index o*s - p + k*d lies in [0, in). */
static void valid_range(int64_t out, int64_t in, int64_t s, int64_t p, int64_t kd, int64_t *lo,
                        int64_t *hi) {
  int64_t off = kd - p; /* input index = o*s + off */
  int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t h = (in - off + s - 1) / s; /* first o with o*s + off >= in */
  if (in - off <= 0) h = 0;
  if (h > out) h = out;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

int ts__conv2d_fwd_ref(const ts__conv_desc *d, const float *x, const float *w, const float *b,
                       float *y) {
  int rc = ts__conv_check(d, "conv2d (ref)");
  if (rc) return rc;
  if (!x || !w || !y) return ts_error_set(TS_EINVAL, "conv2d (ref): NULL buffer");
  const int64_t N = d->N, C = d->C, H = d->H, W = d->W, O = d->O, KH = d->KH, KW = d->KW;
  const int64_t OH = d->OH, OW = d->OW, Cg = C / d->groups, Og = O / d->groups;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < O; o++) {
      const int64_t g = o / Og;
      float *yp = y + (n * O + o) * OH * OW;
      const float bv = b ? b[o] : 0.f;
      for (int64_t i = 0; i < OH * OW; i++) yp[i] = bv;
      for (int64_t ci = 0; ci < Cg; ci++) {
        const float *xp = x + (n * C + g * Cg + ci) * H * W;
        const float *wp = w + (o * Cg + ci) * KH * KW;
        for (int64_t kh = 0; kh < KH; kh++) {
          int64_t oh0, oh1;
          valid_range(OH, H, d->sh, d->ph, kh * d->dh, &oh0, &oh1);
          for (int64_t kw = 0; kw < KW; kw++) {
            int64_t ow0, ow1;
            valid_range(OW, W, d->sw, d->pw, kw * d->dw, &ow0, &ow1);
            const int64_t nw = ow1 - ow0, iw0 = ow0 * d->sw - d->pw + kw * d->dw;
            const float wv = wp[kh * KW + kw];
            for (int64_t oh = oh0; oh < oh1; oh++) {
              const float *xr = xp + (oh * d->sh - d->ph + kh * d->dh) * W + iw0;
              float *yr = yp + oh * OW + ow0;
              for (int64_t j = 0; j < nw; j++) yr[j] += wv * xr[j * d->sw];
            }
          }
        }
      }
    }
  return TS_OK;
}

int ts__conv2d_bwd_data_ref(const ts__conv_desc *d, const float *dy, const float *w, float *dx) {
  int rc = ts__conv_check(d, "conv2d_bwd_data (ref)");
  if (rc) return rc;
  if (!dy || !w || !dx) return ts_error_set(TS_EINVAL, "conv2d_bwd_data (ref): NULL buffer");
  const int64_t N = d->N, C = d->C, H = d->H, W = d->W, O = d->O, KH = d->KH, KW = d->KW;
  const int64_t OH = d->OH, OW = d->OW, Cg = C / d->groups, Og = O / d->groups;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      const int64_t g = c / Cg, ci = c % Cg;
      float *xp = dx + (n * C + c) * H * W;
      memset(xp, 0, (size_t)(H * W) * sizeof(float));
      for (int64_t oi = 0; oi < Og; oi++) {
        const int64_t o = g * Og + oi;
        const float *yp = dy + (n * O + o) * OH * OW;
        const float *wp = w + (o * Cg + ci) * KH * KW;
        for (int64_t kh = 0; kh < KH; kh++) {
          int64_t oh0, oh1;
          valid_range(OH, H, d->sh, d->ph, kh * d->dh, &oh0, &oh1);
          for (int64_t kw = 0; kw < KW; kw++) {
            int64_t ow0, ow1;
            valid_range(OW, W, d->sw, d->pw, kw * d->dw, &ow0, &ow1);
            const int64_t nw = ow1 - ow0, iw0 = ow0 * d->sw - d->pw + kw * d->dw;
            const float wv = wp[kh * KW + kw];
            for (int64_t oh = oh0; oh < oh1; oh++) {
              float *xr = xp + (oh * d->sh - d->ph + kh * d->dh) * W + iw0;
              const float *yr = yp + oh * OW + ow0;
              for (int64_t j = 0; j < nw; j++) xr[j * d->sw] += wv * yr[j];
            }
          }
        }
      }
    }
  return TS_OK;
}

int ts__conv2d_bwd_weight_ref(const ts__conv_desc *d, const float *x, const float *dy, float *dw,
                              float *db) {
  int rc = ts__conv_check(d, "conv2d_bwd_weight (ref)");
  if (rc) return rc;
  if (!x || !dy || !dw) return ts_error_set(TS_EINVAL, "conv2d_bwd_weight (ref): NULL buffer");
  const int64_t N = d->N, C = d->C, H = d->H, W = d->W, O = d->O, KH = d->KH, KW = d->KW;
  const int64_t OH = d->OH, OW = d->OW, Cg = C / d->groups, Og = O / d->groups;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t o = 0; o < O; o++)
    for (int64_t ci = 0; ci < Cg; ci++) {
      const int64_t g = o / Og;
      for (int64_t kh = 0; kh < KH; kh++) {
        int64_t oh0, oh1;
        valid_range(OH, H, d->sh, d->ph, kh * d->dh, &oh0, &oh1);
        for (int64_t kw = 0; kw < KW; kw++) {
          int64_t ow0, ow1;
          valid_range(OW, W, d->sw, d->pw, kw * d->dw, &ow0, &ow1);
            const int64_t nw = ow1 - ow0, iw0 = ow0 * d->sw - d->pw + kw * d->dw;
          double acc = 0;
          for (int64_t n = 0; n < N; n++) {
            const float *xp = x + (n * C + g * Cg + ci) * H * W;
            const float *yp = dy + (n * O + o) * OH * OW;
            for (int64_t oh = oh0; oh < oh1; oh++) {
              const float *xr = xp + (oh * d->sh - d->ph + kh * d->dh) * W + iw0;
              const float *yr = yp + oh * OW + ow0;
              float s = 0.f;
              for (int64_t j = 0; j < nw; j++) s += yr[j] * xr[j * d->sw];
              acc += s;
            }
          }
          dw[((o * Cg + ci) * KH + kh) * KW + kw] = (float)acc;
        }
      }
    }
  if (db) {
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < O; o++) {
      double acc = 0;
      for (int64_t n = 0; n < N; n++) acc += ts__sum_run(dy + (n * O + o) * OH * OW, OH * OW);
      db[o] = (float)acc;
    }
  }
  return TS_OK;
}
