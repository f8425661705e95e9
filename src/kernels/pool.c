/* Pooling kernels (see pool.h): plain-C reference kernels and oneDNN pooling primitives on
 * plain NCHW memory (pooling is memory-bound; reorders would cost more than they save). */
#include "pool.h"

#include <math.h>
#include <string.h>

#include "dnnl_ctx.h"
#include "tessera/base.h"

int64_t ts__pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p) {
  if (k < 1 || s < 1 || p < 0) return 0;
  int64_t num = in + 2 * p - k;
  return num < 0 ? 0 : num / s + 1;
}

int ts__pool_check(const ts__pool_desc *d, int is_max, const char *what) {
  if (!d) return ts_error_set(TS_EINVAL, "%s: NULL descriptor", what);
  if (d->N < 1 || d->C < 1 || d->H < 1 || d->W < 1 || d->kh < 1 || d->kw < 1 || d->sh < 1 ||
      d->sw < 1 || d->ph < 0 || d->pw < 0)
    return ts_error_set(TS_EINVAL, "%s: invalid sizes or attributes", what);
  if (2 * d->ph > d->kh || 2 * d->pw > d->kw)
    return ts_error_set(TS_EINVAL, "%s: padding %lldx%lld exceeds half the window %lldx%lld",
                        what, (long long)d->ph, (long long)d->pw, (long long)d->kh,
                        (long long)d->kw);
  if (is_max && d->kh * d->kw > 256)
    return ts_error_set(TS_EINVAL, "%s: window %lldx%lld has more than 256 elements", what,
                        (long long)d->kh, (long long)d->kw);
  if (d->OH != ts__pool_out_size(d->H, d->kh, d->sh, d->ph) ||
      d->OW != ts__pool_out_size(d->W, d->kw, d->sw, d->pw) || d->OH < 1 || d->OW < 1)
    return ts_error_set(TS_EINVAL, "%s: output size %lldx%lld inconsistent with input", what,
                        (long long)d->OH, (long long)d->OW);
  return TS_OK;
}

/* Clipped window [h0,h1) x [w0,w1) of output (oh, ow). */
#define WINDOW(d, oh, ow)                                                      \
  int64_t hs = (oh) * (d)->sh - (d)->ph, ws_ = (ow) * (d)->sw - (d)->pw;       \
  int64_t h0 = hs < 0 ? 0 : hs, w0 = ws_ < 0 ? 0 : ws_;                        \
  int64_t h1 = hs + (d)->kh > (d)->H ? (d)->H : hs + (d)->kh;                  \
  int64_t w1 = ws_ + (d)->kw > (d)->W ? (d)->W : ws_ + (d)->kw

int ts__maxpool2d_fwd_ref(const ts__pool_desc *d, const float *x, float *y, uint8_t *ws) {
  int rc = ts__pool_check(d, 1, "maxpool2d (ref)");
  if (rc) return rc;
  if (!x || !y || !ws) return ts_error_set(TS_EINVAL, "maxpool2d (ref): NULL buffer");
  const int64_t H = d->H, W = d->W, OH = d->OH, OW = d->OW;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < d->N * d->C; p++) {
    const float *xp = x + p * H * W;
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        WINDOW(d, oh, ow);
        float m = -INFINITY;
        int64_t best = (h0 - hs) * d->kw + (w0 - ws_);
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) {
            float v = xp[h * W + w];
            if (v > m || (isnan(v) && !isnan(m))) {
              m = v;
              best = (h - hs) * d->kw + (w - ws_);
            }
          }
        y[(p * OH + oh) * OW + ow] = m;
        ws[(p * OH + oh) * OW + ow] = (uint8_t)best;
      }
  }
  return TS_OK;
}

int ts__maxpool2d_bwd_ref(const ts__pool_desc *d, const float *dy, const uint8_t *ws, float *dx) {
  int rc = ts__pool_check(d, 1, "maxpool2d_bwd (ref)");
  if (rc) return rc;
  if (!dy || !ws || !dx) return ts_error_set(TS_EINVAL, "maxpool2d_bwd (ref): NULL buffer");
  const int64_t H = d->H, W = d->W, OH = d->OH, OW = d->OW;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < d->N * d->C; p++) {
    float *xp = dx + p * H * W;
    memset(xp, 0, (size_t)(H * W) * sizeof(float));
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        const int64_t i = (p * OH + oh) * OW + ow;
        const int64_t h = oh * d->sh - d->ph + ws[i] / d->kw;
        const int64_t w = ow * d->sw - d->pw + ws[i] % d->kw;
        if (h >= 0 && h < H && w >= 0 && w < W) xp[h * W + w] += dy[i];
      }
  }
  return TS_OK;
}

int ts__avgpool2d_fwd_ref(const ts__pool_desc *d, const float *x, float *y) {
  int rc = ts__pool_check(d, 0, "avgpool2d (ref)");
  if (rc) return rc;
  if (!x || !y) return ts_error_set(TS_EINVAL, "avgpool2d (ref): NULL buffer");
  const int64_t H = d->H, W = d->W, OH = d->OH, OW = d->OW;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < d->N * d->C; p++) {
    const float *xp = x + p * H * W;
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        WINDOW(d, oh, ow);
        float s = 0.f;
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) s += xp[h * W + w];
        y[(p * OH + oh) * OW + ow] = s / (float)((h1 - h0) * (w1 - w0));
      }
  }
  return TS_OK;
}

int ts__avgpool2d_bwd_ref(const ts__pool_desc *d, const float *dy, float *dx) {
  int rc = ts__pool_check(d, 0, "avgpool2d_bwd (ref)");
  if (rc) return rc;
  if (!dy || !dx) return ts_error_set(TS_EINVAL, "avgpool2d_bwd (ref): NULL buffer");
  const int64_t H = d->H, W = d->W, OH = d->OH, OW = d->OW;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < d->N * d->C; p++) {
    float *xp = dx + p * H * W;
    memset(xp, 0, (size_t)(H * W) * sizeof(float));
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        WINDOW(d, oh, ow);
        const float g = dy[(p * OH + oh) * OW + ow] / (float)((h1 - h0) * (w1 - w0));
        for (int64_t h = h0; h < h1; h++)
          for (int64_t w = w0; w < w1; w++) xp[h * W + w] += g;
      }
  }
  return TS_OK;
}

/* ------------------------------------------------------------------ oneDNN */

enum { P_MAX_FWD = 0, P_MAX_BWD, P_AVG_FWD, P_AVG_BWD };

typedef struct {
  char tag[8];
  int32_t kind, pad_;
  int64_t N, C, H, W, OH, OW, kh, kw, sh, sw, ph, pw;
} pool_key;

static int pool_desc_init(dnnl_pooling_desc_t *pdsc, int fwd, dnnl_alg_kind_t alg,
                          const ts__pool_desc *d, const dnnl_memory_desc_t *x,
                          const dnnl_memory_desc_t *y) {
  dnnl_dims_t str = {d->sh, d->sw}, ker = {d->kh, d->kw}, pad = {d->ph, d->pw};
  dnnl_status_t st =
      fwd ? dnnl_pooling_forward_desc_init(pdsc, dnnl_forward_training, alg, x, y, str, ker, pad,
                                           pad)
          : dnnl_pooling_backward_desc_init(pdsc, alg, x, y, str, ker, pad, pad);
  return ts__dnnl_check(st, "pooling descriptor");
}

/* Cached primitive of `kind`; also returns the plain x and y descriptors. */
static ts__dnnl_prim *pool_prim(const ts__pool_desc *d, int kind, dnnl_memory_desc_t *x,
                                dnnl_memory_desc_t *y) {
  int64_t xd[4] = {d->N, d->C, d->H, d->W}, yd[4] = {d->N, d->C, d->OH, d->OW};
  if (ts__dnnl_md_plain(x, 4, xd, dnnl_f32) || ts__dnnl_md_plain(y, 4, yd, dnnl_f32)) return NULL;
  pool_key key;
  memset(&key, 0, sizeof key);
  memcpy(key.tag, "pool2d", 7);
  key.kind = kind;
  key.N = d->N, key.C = d->C, key.H = d->H, key.W = d->W, key.OH = d->OH, key.OW = d->OW;
  key.kh = d->kh, key.kw = d->kw, key.sh = d->sh, key.sw = d->sw, key.ph = d->ph, key.pw = d->pw;
  ts__dnnl_prim *p = ts__dnnl_cache_get(&key, sizeof key);
  if (p) return p;
  const dnnl_alg_kind_t alg =
      kind <= P_MAX_BWD ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding;
  dnnl_pooling_desc_t fd, bd;
  dnnl_primitive_desc_t fpd = NULL, pd = NULL;
  if (pool_desc_init(&fd, 1, alg, d, x, y)) return NULL;
  if (ts__dnnl_check(dnnl_primitive_desc_create(&fpd, &fd, NULL, ts__dnnl_engine(), NULL),
                     "pooling forward primitive descriptor"))
    return NULL;
  if (kind == P_MAX_FWD || kind == P_AVG_FWD) {
    pd = fpd;
  } else {
    dnnl_status_t st = pool_desc_init(&bd, 0, alg, d, x, y) ? dnnl_invalid_arguments
                       : dnnl_primitive_desc_create(&pd, &bd, NULL, ts__dnnl_engine(), fpd);
    dnnl_primitive_desc_destroy(fpd);
    if (ts__dnnl_check(st, "pooling backward primitive descriptor")) return NULL;
  }
  if (kind == P_MAX_FWD || kind == P_MAX_BWD) {
    /* The workspace must be one u8 per output element (the graph allocates exactly that). */
    const dnnl_memory_desc_t *w = dnnl_primitive_desc_query_md(pd, dnnl_query_workspace_md, 0);
    if (!w || w->data_type != dnnl_u8 ||
        dnnl_memory_desc_get_size(w) != (size_t)(d->N * d->C * d->OH * d->OW)) {
      dnnl_primitive_desc_destroy(pd);
      ts_error_set(TS_EUNSUPPORTED, "unexpected workspace layout");
      return NULL;
    }
  }
  return ts__dnnl_cache_put_pd(&key, sizeof key, pd);
}

/* oneDNN keeps a u8 workspace only for windows under 256 elements (s32 above); a 256-element
 * window runs the reference kernels in both directions, so fwd and bwd still agree. */
static int dnnl_max_ok(const ts__pool_desc *d) { return d->kh * d->kw < 256; }

static const dnnl_memory_desc_t *ws_md(ts__dnnl_prim *p) {
  return dnnl_primitive_desc_query_md(p->pd, dnnl_query_workspace_md, 0);
}

int ts__maxpool2d_fwd_dnnl(const ts__pool_desc *d, const float *x, float *y, uint8_t *ws) {
  int rc = ts__pool_check(d, 1, "maxpool2d (oneDNN)");
  if (rc) return rc;
  if (!x || !y || !ws) return ts_error_set(TS_EINVAL, "maxpool2d (oneDNN): NULL buffer");
  if (!dnnl_max_ok(d)) return ts__maxpool2d_fwd_ref(d, x, y, ws);
  dnnl_memory_desc_t xm, ym;
  ts__dnnl_prim *p = pool_prim(d, P_MAX_FWD, &xm, &ym);
  if (!p) return ts_error_wrap(TS_EBACKEND, "maxpool2d (oneDNN)");
  dnnl_exec_arg_t a[3] = {{DNNL_ARG_SRC, ts__dnnl_mem(&xm, (void *)x)},
                          {DNNL_ARG_DST, ts__dnnl_mem(&ym, y)},
                          {DNNL_ARG_WORKSPACE, ts__dnnl_mem(ws_md(p), ws)}};
  return ts__dnnl_run(p, 3, a, "maxpool2d");
}

int ts__maxpool2d_bwd_dnnl(const ts__pool_desc *d, const float *dy, const uint8_t *ws, float *dx) {
  int rc = ts__pool_check(d, 1, "maxpool2d_bwd (oneDNN)");
  if (rc) return rc;
  if (!dy || !ws || !dx) return ts_error_set(TS_EINVAL, "maxpool2d_bwd (oneDNN): NULL buffer");
  if (!dnnl_max_ok(d)) return ts__maxpool2d_bwd_ref(d, dy, ws, dx);
  dnnl_memory_desc_t xm, ym;
  ts__dnnl_prim *p = pool_prim(d, P_MAX_BWD, &xm, &ym);
  if (!p) return ts_error_wrap(TS_EBACKEND, "maxpool2d_bwd (oneDNN)");
  dnnl_exec_arg_t a[3] = {{DNNL_ARG_DIFF_DST, ts__dnnl_mem(&ym, (void *)dy)},
                          {DNNL_ARG_WORKSPACE, ts__dnnl_mem(ws_md(p), (void *)ws)},
                          {DNNL_ARG_DIFF_SRC, ts__dnnl_mem(&xm, dx)}};
  return ts__dnnl_run(p, 3, a, "maxpool2d_bwd");
}

int ts__avgpool2d_fwd_dnnl(const ts__pool_desc *d, const float *x, float *y) {
  int rc = ts__pool_check(d, 0, "avgpool2d (oneDNN)");
  if (rc) return rc;
  if (!x || !y) return ts_error_set(TS_EINVAL, "avgpool2d (oneDNN): NULL buffer");
  dnnl_memory_desc_t xm, ym;
  ts__dnnl_prim *p = pool_prim(d, P_AVG_FWD, &xm, &ym);
  if (!p) return ts_error_wrap(TS_EBACKEND, "avgpool2d (oneDNN)");
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_SRC, ts__dnnl_mem(&xm, (void *)x)},
                          {DNNL_ARG_DST, ts__dnnl_mem(&ym, y)}};
  return ts__dnnl_run(p, 2, a, "avgpool2d");
}

int ts__avgpool2d_bwd_dnnl(const ts__pool_desc *d, const float *dy, float *dx) {
  int rc = ts__pool_check(d, 0, "avgpool2d_bwd (oneDNN)");
  if (rc) return rc;
  if (!dy || !dx) return ts_error_set(TS_EINVAL, "avgpool2d_bwd (oneDNN): NULL buffer");
  dnnl_memory_desc_t xm, ym;
  ts__dnnl_prim *p = pool_prim(d, P_AVG_BWD, &xm, &ym);
  if (!p) return ts_error_wrap(TS_EBACKEND, "avgpool2d_bwd (oneDNN)");
  dnnl_exec_arg_t a[2] = {{DNNL_ARG_DIFF_DST, ts__dnnl_mem(&ym, (void *)dy)},
                          {DNNL_ARG_DIFF_SRC, ts__dnnl_mem(&xm, dx)}};
  return ts__dnnl_run(p, 2, a, "avgpool2d_bwd");
}
