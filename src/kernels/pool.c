/* Pooling kernels (see pool.h): plain-C reference kernels and oneDNN pooling primitives on
 * plain NCHW memory (pooling is memory-bound; reorders would cost more than they save). */
#include "pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_ctx.h"
#include "lowp.h"
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

/* One (n, c) plane of each kernel, in f32: the f32 kernels run them on the tensors in place, the
 * 16-bit kernels on planes widened into per-thread f32 buffers (pool_loops below). */

// xp (H,W) -> yp (OH,OW), wp (OH,OW) u8
static void max_plane(const ts__pool_desc *d, const float *xp, float *yp, uint8_t *wp) {
  const int64_t W = d->W, OH = d->OH, OW = d->OW;
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
      yp[oh * OW + ow] = m;
      wp[oh * OW + ow] = (uint8_t)best;
    }
}

// dyp (OH,OW), wp (OH,OW) u8 -> dxp (H,W)
static void max_bwd_plane(const ts__pool_desc *d, const float *dyp, const uint8_t *wp, float *dxp) {
  const int64_t H = d->H, W = d->W, OH = d->OH, OW = d->OW;
  memset(dxp, 0, (size_t)(H * W) * sizeof(float));
  for (int64_t oh = 0; oh < OH; oh++)
    for (int64_t ow = 0; ow < OW; ow++) {
      const int64_t i = oh * OW + ow;
      const int64_t h = oh * d->sh - d->ph + wp[i] / d->kw;
      const int64_t w = ow * d->sw - d->pw + wp[i] % d->kw;
      if (h >= 0 && h < H && w >= 0 && w < W) dxp[h * W + w] += dyp[i];
    }
}

// xp (H,W) -> yp (OH,OW)
static void avg_plane(const ts__pool_desc *d, const float *xp, float *yp) {
  const int64_t W = d->W, OH = d->OH, OW = d->OW;
  for (int64_t oh = 0; oh < OH; oh++)
    for (int64_t ow = 0; ow < OW; ow++) {
      WINDOW(d, oh, ow);
      float s = 0.f;
      for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) s += xp[h * W + w];
      yp[oh * OW + ow] = s / (float)((h1 - h0) * (w1 - w0));
    }
}

// dyp (OH,OW) -> dxp (H,W)
static void avg_bwd_plane(const ts__pool_desc *d, const float *dyp, float *dxp) {
  const int64_t H = d->H, W = d->W, OH = d->OH, OW = d->OW;
  memset(dxp, 0, (size_t)(H * W) * sizeof(float));
  for (int64_t oh = 0; oh < OH; oh++)
    for (int64_t ow = 0; ow < OW; ow++) {
      WINDOW(d, oh, ow);
      const float g = dyp[oh * OW + ow] / (float)((h1 - h0) * (w1 - w0));
      for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) dxp[h * W + w] += g;
    }
}

enum { P_MAX_FWD = 0, P_MAX_BWD, P_AVG_FWD, P_AVG_BWD };

/* Runs the plane kernel of `kind` over the N*C planes: src (x or dy) and dst (y or dx) of dtype
 * dt (f32: in place; bf16/f16: each plane widened into a per-thread f32 buffer and its result
 * rounded once), wsi/wso the max-pooling workspace read (bwd) or written (fwd). */
static int pool_loops(int kind, const ts__pool_desc *d, ts_dtype dt, const void *src, const uint8_t *wsi, void *dst,
                      uint8_t *wso, const char *what) {
  const int fwd = kind == P_MAX_FWD || kind == P_AVG_FWD;
  const int64_t X = d->H * d->W, Y = d->OH * d->OW, ns = fwd ? X : Y, nd = fwd ? Y : X;
  const size_t es = dt == TS_F32 ? 4 : 2;
  int oom = 0;
#pragma omp parallel
  {
    float *buf = dt == TS_F32 ? NULL : malloc((size_t)(ns + nd) * sizeof(float));
    if (dt != TS_F32 && !buf) {
#pragma omp atomic write
      oom = 1;
    }
#pragma omp for schedule(static)
    for (int64_t p = 0; p < d->N * d->C; p++) {
      if (dt != TS_F32 && !buf) continue;
      const void *sp = (const char *)src + (size_t)(p * ns) * es;
      void *dp = (char *)dst + (size_t)(p * nd) * es;
      const float *s = dt == TS_F32 ? (const float *)sp : buf;
      float *o = dt == TS_F32 ? (float *)dp : buf + ns;
      if (dt != TS_F32) ts__lp_widen(sp, dt, buf, ns);
      switch (kind) {
        case P_MAX_FWD: max_plane(d, s, o, wso + p * Y); break;
        case P_MAX_BWD: max_bwd_plane(d, s, wsi + p * Y, o); break;
        case P_AVG_FWD: avg_plane(d, s, o); break;
        default: avg_bwd_plane(d, s, o); break;
      }
      if (dt != TS_F32) ts__lp_narrow(o, dp, dt, nd);
    }
    free(buf);
  }
  return oom ? ts_error_set(TS_ENOMEM, "%s: out of memory for plane buffers", what) : TS_OK;
}

int ts__maxpool2d_fwd_ref(const ts__pool_desc *d, const float *x, float *y, uint8_t *ws) {
  int rc = ts__pool_check(d, 1, "maxpool2d (ref)");
  if (rc) return rc;
  if (!x || !y || !ws) return ts_error_set(TS_EINVAL, "maxpool2d (ref): NULL buffer");
  return pool_loops(P_MAX_FWD, d, TS_F32, x, NULL, y, ws, "maxpool2d (ref)");
}

int ts__maxpool2d_bwd_ref(const ts__pool_desc *d, const float *dy, const uint8_t *ws, float *dx) {
  int rc = ts__pool_check(d, 1, "maxpool2d_bwd (ref)");
  if (rc) return rc;
  if (!dy || !ws || !dx) return ts_error_set(TS_EINVAL, "maxpool2d_bwd (ref): NULL buffer");
  return pool_loops(P_MAX_BWD, d, TS_F32, dy, ws, dx, NULL, "maxpool2d_bwd (ref)");
}

int ts__avgpool2d_fwd_ref(const ts__pool_desc *d, const float *x, float *y) {
  int rc = ts__pool_check(d, 0, "avgpool2d (ref)");
  if (rc) return rc;
  if (!x || !y) return ts_error_set(TS_EINVAL, "avgpool2d (ref): NULL buffer");
  return pool_loops(P_AVG_FWD, d, TS_F32, x, NULL, y, NULL, "avgpool2d (ref)");
}

int ts__avgpool2d_bwd_ref(const ts__pool_desc *d, const float *dy, float *dx) {
  int rc = ts__pool_check(d, 0, "avgpool2d_bwd (ref)");
  if (rc) return rc;
  if (!dy || !dx) return ts_error_set(TS_EINVAL, "avgpool2d_bwd (ref): NULL buffer");
  return pool_loops(P_AVG_BWD, d, TS_F32, dy, NULL, dx, NULL, "avgpool2d_bwd (ref)");
}

/* ------------------------------------------------------------------ oneDNN */

typedef struct {
  char tag[8];
  int32_t kind, dt; /* dt: the data type of x/y (dnnl_data_type_t) */
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

/* Cached primitive of `kind` on x/y of data type dt (f32 or bf16); also returns the plain x and
 * y descriptors. */
static ts__dnnl_prim *pool_prim(const ts__pool_desc *d, int kind, dnnl_data_type_t dt, dnnl_memory_desc_t *x,
                                dnnl_memory_desc_t *y) {
  int64_t xd[4] = {d->N, d->C, d->H, d->W}, yd[4] = {d->N, d->C, d->OH, d->OW};
  if (ts__dnnl_md_plain(x, 4, xd, dt) || ts__dnnl_md_plain(y, 4, yd, dt)) return NULL;
  pool_key key;
  memset(&key, 0, sizeof key);
  memcpy(key.tag, "pool2d", 7);
  key.kind = kind;
  key.dt = (int32_t)dt;
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
 * window runs the reference loops in both directions, so fwd and bwd still agree. */
static int dnnl_max_ok(const ts__pool_desc *d) { return d->kh * d->kw < 256; }

static const dnnl_memory_desc_t *ws_md(ts__dnnl_prim *p) {
  return dnnl_primitive_desc_query_md(p->pd, dnnl_query_workspace_md, 0);
}

/* The oneDNN pooling of `kind` on src (x or dy) -> dst (y or dx) of data type dt, with the
 * max-pooling workspace ws (written by the forward, read by the backward). Checked by the caller. */
static int pool_dnnl(int kind, const ts__pool_desc *d, dnnl_data_type_t dt, const void *src, uint8_t *ws, void *dst,
                     const char *what) {
  dnnl_memory_desc_t xm, ym;
  ts__dnnl_prim *p = pool_prim(d, kind, dt, &xm, &ym);
  if (!p) return ts_error_wrap(TS_EBACKEND, "%s", what);
  const int fwd = kind == P_MAX_FWD || kind == P_AVG_FWD, is_max = kind <= P_MAX_BWD;
  dnnl_exec_arg_t a[3] = {{fwd ? DNNL_ARG_SRC : DNNL_ARG_DIFF_DST, ts__dnnl_mem(fwd ? &xm : &ym, (void *)src)},
                          {fwd ? DNNL_ARG_DST : DNNL_ARG_DIFF_SRC, ts__dnnl_mem(fwd ? &ym : &xm, dst)},
                          {DNNL_ARG_WORKSPACE, is_max ? ts__dnnl_mem(ws_md(p), ws) : NULL}};
  return ts__dnnl_run(p, is_max ? 3 : 2, a, what);
}

int ts__maxpool2d_fwd_dnnl(const ts__pool_desc *d, const float *x, float *y, uint8_t *ws) {
  int rc = ts__pool_check(d, 1, "maxpool2d (oneDNN)");
  if (rc) return rc;
  if (!x || !y || !ws) return ts_error_set(TS_EINVAL, "maxpool2d (oneDNN): NULL buffer");
  if (!dnnl_max_ok(d)) return ts__maxpool2d_fwd_ref(d, x, y, ws);
  return pool_dnnl(P_MAX_FWD, d, dnnl_f32, x, ws, y, "maxpool2d");
}

int ts__maxpool2d_bwd_dnnl(const ts__pool_desc *d, const float *dy, const uint8_t *ws, float *dx) {
  int rc = ts__pool_check(d, 1, "maxpool2d_bwd (oneDNN)");
  if (rc) return rc;
  if (!dy || !ws || !dx) return ts_error_set(TS_EINVAL, "maxpool2d_bwd (oneDNN): NULL buffer");
  if (!dnnl_max_ok(d)) return ts__maxpool2d_bwd_ref(d, dy, ws, dx);
  return pool_dnnl(P_MAX_BWD, d, dnnl_f32, dy, (uint8_t *)ws, dx, "maxpool2d_bwd");
}

int ts__avgpool2d_fwd_dnnl(const ts__pool_desc *d, const float *x, float *y) {
  int rc = ts__pool_check(d, 0, "avgpool2d (oneDNN)");
  if (rc) return rc;
  if (!x || !y) return ts_error_set(TS_EINVAL, "avgpool2d (oneDNN): NULL buffer");
  return pool_dnnl(P_AVG_FWD, d, dnnl_f32, x, NULL, y, "avgpool2d");
}

int ts__avgpool2d_bwd_dnnl(const ts__pool_desc *d, const float *dy, float *dx) {
  int rc = ts__pool_check(d, 0, "avgpool2d_bwd (oneDNN)");
  if (rc) return rc;
  if (!dy || !dx) return ts_error_set(TS_EINVAL, "avgpool2d_bwd (oneDNN): NULL buffer");
  return pool_dnnl(P_AVG_BWD, d, dnnl_f32, dy, NULL, dx, "avgpool2d_bwd");
}

const char *ts__pool_dnnl_impl(const ts__pool_desc *d, int is_max, int bwd, int bf16) {
  dnnl_memory_desc_t xm, ym;
  const int kind = is_max ? (bwd ? P_MAX_BWD : P_MAX_FWD) : (bwd ? P_AVG_BWD : P_AVG_FWD);
  ts__dnnl_prim *p = pool_prim(d, kind, bf16 ? dnnl_bf16 : dnnl_f32, &xm, &ym);
  const char *impl = NULL;
  if (!p || dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
    return "(none)";
  return impl;
}

/* ------------------------------------------------------------------ 16-bit (pool.h) */

static int lp_dt_check(ts_dtype dt, const char *what) {
  if (dt == TS_F32 || dt == TS_BF16 || dt == TS_F16) return TS_OK;
  return ts_error_set(TS_EDTYPE, "%s: dtype %s (f32, bf16 or f16)", what, ts_dtype_name(dt));
}

/* f16 on the fast backend: f32 copies around the f32 oneDNN kernel, outputs rounded once. */
static int pool_f16_converted(int kind, const ts__pool_desc *d, const void *src, uint8_t *ws, void *dst,
                              const char *what) {
  const int fwd = kind == P_MAX_FWD || kind == P_AVG_FWD;
  const int64_t nx = d->N * d->C * d->H * d->W, ny = d->N * d->C * d->OH * d->OW;
  const int64_t ns = fwd ? nx : ny, nd = fwd ? ny : nx;
  float *fs = ts__lp_in(src, TS_F16, ns, what), *fd = fs ? ts__lp_in(NULL, TS_F16, nd, what) : NULL;
  int rc = TS_ENOMEM;
  if (fd) {
    switch (kind) {
      case P_MAX_FWD: rc = ts__maxpool2d_fwd_dnnl(d, fs, fd, ws); break;
      case P_MAX_BWD: rc = ts__maxpool2d_bwd_dnnl(d, fs, ws, fd); break;
      case P_AVG_FWD: rc = ts__avgpool2d_fwd_dnnl(d, fs, fd); break;
      default: rc = ts__avgpool2d_bwd_dnnl(d, fs, fd); break;
    }
  }
  if (rc == TS_OK) ts__lp_from_f32(fd, dst, TS_F16, nd);
  ts_free(fs);
  ts_free(fd);
  return rc;
}

/* Dispatch of the 16-bit kernels (checked): f32 -> the f32 kernels; dnnl and bf16 -> oneDNN on
 * bf16 memory (max pooling with a 256-element window: the loops, both directions); dnnl and f16 ->
 * converted; otherwise the native plane loops. */
static int pool_lp(int kind, const ts__pool_desc *d, ts_dtype dt, int dnnl, const void *src, const uint8_t *wsi,
                   void *dst, uint8_t *wso, const char *what) {
  const int is_max = kind <= P_MAX_BWD;
  uint8_t *ws = kind == P_MAX_FWD ? wso : (uint8_t *)wsi;
  int rc = ts__pool_check(d, is_max, what);
  if (!rc) rc = lp_dt_check(dt, what);
  if (rc) return rc;
  if (!src || !dst || (is_max && !ws)) return ts_error_set(TS_EINVAL, "%s: NULL buffer", what);
  if (dt == TS_F32 || (dnnl && dt == TS_F16)) {
    if (dt == TS_F16) return pool_f16_converted(kind, d, src, ws, dst, what);
    switch (kind) {
      case P_MAX_FWD: return dnnl ? ts__maxpool2d_fwd_dnnl(d, src, dst, ws) : ts__maxpool2d_fwd_ref(d, src, dst, ws);
      case P_MAX_BWD: return dnnl ? ts__maxpool2d_bwd_dnnl(d, src, ws, dst) : ts__maxpool2d_bwd_ref(d, src, ws, dst);
      case P_AVG_FWD: return dnnl ? ts__avgpool2d_fwd_dnnl(d, src, dst) : ts__avgpool2d_fwd_ref(d, src, dst);
      default: return dnnl ? ts__avgpool2d_bwd_dnnl(d, src, dst) : ts__avgpool2d_bwd_ref(d, src, dst);
    }
  }
  if (dnnl && ts__dnnl_bf16() && (!is_max || dnnl_max_ok(d))) return pool_dnnl(kind, d, dnnl_bf16, src, ws, dst, what);
  return pool_loops(kind, d, dt, src, wsi, dst, wso, what);
}

int ts__maxpool2d_fwd_lp(const ts__pool_desc *d, ts_dtype dt, int dnnl, const void *x, void *y, uint8_t *ws) {
  return pool_lp(P_MAX_FWD, d, dt, dnnl, x, NULL, y, ws, dnnl ? "maxpool2d (16-bit, oneDNN)" : "maxpool2d (16-bit)");
}

int ts__maxpool2d_bwd_lp(const ts__pool_desc *d, ts_dtype dt, int dnnl, const void *dy, const uint8_t *ws, void *dx) {
  return pool_lp(P_MAX_BWD, d, dt, dnnl, dy, ws, dx, NULL,
                 dnnl ? "maxpool2d_bwd (16-bit, oneDNN)" : "maxpool2d_bwd (16-bit)");
}

int ts__avgpool2d_fwd_lp(const ts__pool_desc *d, ts_dtype dt, int dnnl, const void *x, void *y) {
  return pool_lp(P_AVG_FWD, d, dt, dnnl, x, NULL, y, NULL, dnnl ? "avgpool2d (16-bit, oneDNN)" : "avgpool2d (16-bit)");
}

int ts__avgpool2d_bwd_lp(const ts__pool_desc *d, ts_dtype dt, int dnnl, const void *dy, void *dx) {
  return pool_lp(P_AVG_BWD, d, dt, dnnl, dy, NULL, dx, NULL,
                 dnnl ? "avgpool2d_bwd (16-bit, oneDNN)" : "avgpool2d_bwd (16-bit)");
}
