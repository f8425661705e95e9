/* Per-sample transforms (docs/data-pipeline.md). Semantics follow torchvision 0.14 on tensors:
 * RandomCrop(size, padding) with zero fill, CenterCrop (zero padding when the crop is larger),
 * Resize (bilinear, antialias off, half-pixel centres; u8 computed in f32 then rounded half to
 * even as torch.round), RandomHorizontalFlip / RandomVerticalFlip, ConvertImageDtype-style
 * rescale, Normalize ((x - mean) / std, a true division as torch's div_), RandomErasing
 * (value 0, 10 attempts, log-uniform aspect ratio).
 *
 * Images are (H,W,C) by default (what sources decode), or (C,H,W) when a transform's `chw` is 1
 * (random_erasing defaults to CHW, as torchvision), or (H,W). Geometric transforms see an image
 * as `outer` planes of H rows of W pixels of `inner` elements: HWC is (1,H,W,C), CHW (C,H,W,1).
 *
 * Random draws: transform j of a sample with key k uses Philox(k, counter (j, i)) for its i-th
 * 128-bit draw, so a sample's augmentation depends only on (key, transform position). */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/text.h"
#include "transform_internal.h"

/* ---- constructors ---- */

static ts_transform tf_base(ts_transform_kind k) {
  ts_transform t;
  memset(&t, 0, sizeof t);
  t.kind = k;
  t.p = 1.0f;
  t.scale = 1.0f;
  t.dtype = TS_F32;
  return t;
}

ts_transform ts_tf_random_crop(int h, int w, int pad) {
  ts_transform t = tf_base(TS_TF_RANDOM_CROP);
  t.h = h, t.w = w, t.pad = pad;
  return t;
}
ts_transform ts_tf_center_crop(int h, int w) {
  ts_transform t = tf_base(TS_TF_CENTER_CROP);
  t.h = h, t.w = w;
  return t;
}
ts_transform ts_tf_resize(int h, int w) {
  ts_transform t = tf_base(TS_TF_RESIZE);
  t.h = h, t.w = w;
  return t;
}
ts_transform ts_tf_hflip(float p) {
  ts_transform t = tf_base(TS_TF_HFLIP);
  t.p = p;
  return t;
}
ts_transform ts_tf_vflip(float p) {
  ts_transform t = tf_base(TS_TF_VFLIP);
  t.p = p;
  return t;
}
ts_transform ts_tf_to_float(float scale) {
  ts_transform t = tf_base(TS_TF_TO_FLOAT);
  t.scale = scale;
  return t;
}
ts_transform ts_tf_normalize(int nch, const float *mean, const float *std) {
  ts_transform t = tf_base(TS_TF_NORMALIZE);
  t.nch = nch;
  for (int c = 0; c < nch && c < 8; c++) {
    t.mean[c] = mean ? mean[c] : 0.0f;
    t.std[c] = std ? std[c] : 1.0f;
  }
  return t;
}
ts_transform ts_tf_hwc_to_chw(void) { return tf_base(TS_TF_HWC_TO_CHW); }
ts_transform ts_tf_cast(ts_dtype dt) {
  ts_transform t = tf_base(TS_TF_CAST);
  t.dtype = dt;
  return t;
}
ts_transform ts_tf_random_erasing(float p) {
  ts_transform t = tf_base(TS_TF_RANDOM_ERASING);
  t.p = p;
  t.chw = 1;
  t.erase_scale[0] = 0.02f, t.erase_scale[1] = 0.33f;
  t.erase_ratio[0] = 0.3f, t.erase_ratio[1] = 3.3f;
  return t;
}

static const char *tf_name(ts_transform_kind k) {
  switch (k) {
    case TS_TF_RANDOM_CROP: return "random_crop";
    case TS_TF_CENTER_CROP: return "center_crop";
    case TS_TF_RESIZE: return "resize";
    case TS_TF_HFLIP: return "hflip";
    case TS_TF_VFLIP: return "vflip";
    case TS_TF_TO_FLOAT: return "to_float";
    case TS_TF_NORMALIZE: return "normalize";
    case TS_TF_HWC_TO_CHW: return "hwc_to_chw";
    case TS_TF_CAST: return "cast";
    case TS_TF_RANDOM_ERASING: return "random_erasing";
  }
  return "?";
}

/* "transform 2 (normalize) on a (32,32,4) u8 sample: <reason>", or "data.transforms[2] (normalize) ..." */
__attribute__((format(printf, 5, 6))) static int tf_err(int code, const ts_transform *t, int j,
                                                        const ts_tensor *x, const char *fmt, ...) {
  char why[256], shp[96];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  ts_shape_str(&x->shape, shp, sizeof shp);
  if (t->list) /* where the user wrote it: "data.transforms[2] (resize)" */
    return ts_error_set(code, "%s[%d] (%s) on a %s %s sample: %s", t->list, t->list_index, tf_name(t->kind),
                        shp, ts_dtype_name(x->dtype), why);
  return ts_error_set(code, "transform %d (%s) on a %s %s sample: %s", j, tf_name(t->kind), shp,
                      ts_dtype_name(x->dtype), why);
}

/* ---- helpers ---- */

typedef struct {
  int64_t outer, H, W, inner;
  size_t es;
} geo;

/* Image geometry of x for layout chw; 0 on success. */
static int get_geo(const ts_tensor *x, int chw, geo *g) {
  const int64_t *d = x->shape.dims;
  g->es = ts_dtype_size(x->dtype);
  if (x->shape.ndim == 2) {
    g->outer = 1, g->H = d[0], g->W = d[1], g->inner = 1;
  } else if (x->shape.ndim == 3) {
    if (chw) g->outer = d[0], g->H = d[1], g->W = d[2], g->inner = 1;
    else g->outer = 1, g->H = d[0], g->W = d[1], g->inner = d[2];
  } else {
    return -1;
  }
  return 0;
}

static ts_shape geo_shape(const ts_tensor *x, int chw, int64_t h, int64_t w) {
  ts_shape s = x->shape;
  if (s.ndim == 2) s.dims[0] = h, s.dims[1] = w;
  else if (chw) s.dims[1] = h, s.dims[2] = w;
  else s.dims[0] = h, s.dims[1] = w;
  return s;
}

/* Uninitialised owned tensor (ts_tensor_free releases it with ts_free). */
static int new_tensor(ts_tensor *t, ts_dtype dt, ts_shape shape) {
  size_t nb = (size_t)ts_shape_numel(&shape) * ts_dtype_size(dt);
  void *p = ts_alloc(nb);
  if (!p) return ts_error_set(TS_ENOMEM, "transform: cannot allocate %zu bytes", nb);
  ts_tensor_view(t, dt, shape, p);
  t->owns = 1;
  return TS_OK;
}

static void replace(ts_tensor *x, ts_tensor *y) {
  ts_tensor_free(x);
  *x = *y;
}

static inline ts_philox_out draw(uint64_t key, int j, uint64_t i) {
  return ts_philox4x32(key, (uint64_t)j, i);
}
/* Uniform integer in [0, n) from 32 random bits (multiply-shift). */
static inline int64_t randint(uint32_t w, int64_t n) { return (int64_t)(((uint64_t)w * (uint64_t)n) >> 32); }

/* Copies the (oh, ow) window at (top, left) of every plane; outside the image is zero. */
static void crop_fill(const uint8_t *src, uint8_t *dst, const geo *g, int64_t top, int64_t left,
                      int64_t oh, int64_t ow) {
  const size_t pix = (size_t)g->inner * g->es, srow = (size_t)g->W * pix, drow = (size_t)ow * pix;
  int64_t x0 = left < 0 ? -left : 0, x1 = g->W - left < ow ? g->W - left : ow;
  if (x1 < x0) x1 = x0;
  const size_t zl = (size_t)x0 * pix, mid = (size_t)(x1 - x0) * pix, zr = drow - zl - mid;
  for (int64_t o = 0; o < g->outer; o++) {
    const uint8_t *plane = src + (size_t)o * (size_t)g->H * srow;
    for (int64_t y = 0; y < oh; y++) {
      uint8_t *d = dst + ((size_t)o * (size_t)oh + (size_t)y) * drow;
      int64_t sy = top + y;
      if (sy < 0 || sy >= g->H || mid == 0) {
        memset(d, 0, drow);
        continue;
      }
      if (zl) memset(d, 0, zl);
      memcpy(d + zl, plane + (size_t)sy * srow + (size_t)(left + x0) * pix, mid);
      if (zr) memset(d + zl + mid, 0, zr);
    }
  }
}

static int do_crop(ts_tensor *x, int chw, const geo *g, int64_t top, int64_t left, int64_t oh, int64_t ow) {
  ts_tensor y;
  int rc = new_tensor(&y, x->dtype, geo_shape(x, chw, oh, ow));
  if (rc) return rc;
  crop_fill(x->data, y.data, g, top, left, oh, ow);
  replace(x, &y);
  return TS_OK;
}

/* Reverses the pixel order of every row in place. */
static void hflip_rows(uint8_t *p, int64_t rows, int64_t W, size_t pix) {
  for (int64_t r = 0; r < rows; r++) {
    uint8_t *row = p + (size_t)r * (size_t)W * pix;
    int64_t a = 0, b = W - 1;
#define SWAP_LOOP(T)                                                   \
  for (T *ra = (T *)row; a < b; a++, b--) {                            \
    T t_ = ra[a];                                                      \
    ra[a] = ra[b];                                                     \
    ra[b] = t_;                                                        \
  }
    switch (pix) {
      case 1: SWAP_LOOP(uint8_t) break;
      case 2: SWAP_LOOP(uint16_t) break;
      case 4: SWAP_LOOP(uint32_t) break;
      case 8: SWAP_LOOP(uint64_t) break;
      default:
        for (; a < b; a++, b--) {
          uint8_t t[64];
          uint8_t *pa = row + (size_t)a * pix, *pb = row + (size_t)b * pix;
          for (size_t off = 0; off < pix; off += sizeof t) {
            size_t m = pix - off < sizeof t ? pix - off : sizeof t;
            memcpy(t, pa + off, m);
            memcpy(pa + off, pb + off, m);
            memcpy(pb + off, t, m);
          }
        }
    }
#undef SWAP_LOOP
  }
}

/* Bilinear resize as torch 1.13's upsample_bilinear2d on CPU (align_corners = False, scale from
 * the sizes): scale = (float)in / out; source position scale * (o + 0.5) - 0.5 evaluated in double
 * (torch adds the double 0.5), clamped at 0; lambda1 = (float)(pos - floor(pos)), lambda0 = 1 -
 * lambda1; out = t0*wy0 + t1*wy1 with t = x0*wx0 + x1*wx1, where each a*b + c*d is a fused
 * multiply-add fma(a, b, c*d), as torch's compiled kernel evaluates it. This reproduces torch's
 * f32 results bitwise, hence also its u8 results after rounding. */
typedef struct {
  int64_t i0, i1;
  float l0, l1;
} lin_idx;

static void lin_indices(lin_idx *ix, int64_t in, int64_t out) {
  const float ratio = (float)in / (float)out;
  for (int64_t o = 0; o < out; o++) {
    if (in == out) {
      ix[o].i0 = ix[o].i1 = o;
      ix[o].l0 = 1.0f, ix[o].l1 = 0.0f;
      continue;
    }
    double real = (double)ratio * ((double)o + 0.5) - 0.5;
    if (real < 0.0) real = 0.0;
    int64_t i0 = (int64_t)real;
    double l1 = real - (double)i0;
    ix[o].i0 = i0;
    ix[o].i1 = i0 + (i0 < in - 1 ? 1 : 0);
    ix[o].l1 = (float)(l1 < 0.0 ? 0.0 : l1 > 1.0 ? 1.0 : l1);
    ix[o].l0 = 1.0f - ix[o].l1;
  }
}

static inline float bilerp(float a, float b, float c, float d, float wx0, float wx1, float wy0, float wy1) {
  float t0 = fmaf(a, wx0, b * wx1);
  float t1 = fmaf(c, wx0, d * wx1);
  return fmaf(t0, wy0, t1 * wy1);
}

static int do_resize(ts_tensor *x, int chw, const geo *g, int64_t oh, int64_t ow) {
  ts_tensor y;
  int rc = new_tensor(&y, x->dtype, geo_shape(x, chw, oh, ow));
  if (rc) return rc;
  lin_idx *iy = malloc(sizeof *iy * (size_t)(oh + ow));
  if (!iy) {
    ts_tensor_free(&y);
    return ts_error_set(TS_ENOMEM, "resize: out of memory");
  }
  lin_idx *ix = iy + oh;
  lin_indices(iy, g->H, oh);
  lin_indices(ix, g->W, ow);
  const int64_t C = g->inner, rs = g->W * C;
  for (int64_t o = 0; o < g->outer; o++) {
    for (int64_t yy = 0; yy < oh; yy++) {
      const int64_t r0 = (o * g->H + iy[yy].i0) * rs, r1 = (o * g->H + iy[yy].i1) * rs;
      const float wy0 = iy[yy].l0, wy1 = iy[yy].l1;
      const int64_t dbase = (o * oh + yy) * ow * C;
      if (x->dtype == TS_U8) {
        const uint8_t *s = x->data;
        uint8_t *d = (uint8_t *)y.data + dbase;
        for (int64_t xx = 0; xx < ow; xx++) {
          const int64_t c0 = ix[xx].i0 * C, c1 = ix[xx].i1 * C;
          for (int64_t c = 0; c < C; c++) {
            float v = bilerp(s[r0 + c0 + c], s[r0 + c1 + c], s[r1 + c0 + c], s[r1 + c1 + c], ix[xx].l0,
                             ix[xx].l1, wy0, wy1);
            v = nearbyintf(v); /* round half to even, as torch.round */
            d[xx * C + c] = (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
          }
        }
      } else {
        const float *s = x->data;
        float *d = (float *)y.data + dbase;
        for (int64_t xx = 0; xx < ow; xx++) {
          const int64_t c0 = ix[xx].i0 * C, c1 = ix[xx].i1 * C;
          for (int64_t c = 0; c < C; c++)
            d[xx * C + c] = bilerp(s[r0 + c0 + c], s[r0 + c1 + c], s[r1 + c0 + c], s[r1 + c1 + c], ix[xx].l0,
                                   ix[xx].l1, wy0, wy1);
        }
      }
    }
  }
  free(iy);
  replace(x, &y);
  return TS_OK;
}

/* to_float's per-value formula. A scale of exactly 1/k for an integer k divides by k, as
 * torchvision's x / 255 does, so the result is bitwise what torchvision computes. */
typedef struct {
  int use_div;
  float div, scale, shift;
} tofl;

static tofl tofl_make(const ts_transform *t) {
  tofl f = {0, 1.0f, t->scale, t->shift};
  if (t->scale > 0.0f) {
    double k = nearbyint(1.0 / (double)t->scale);
    if (k >= 1.0 && k <= 16777216.0 && (float)(1.0 / k) == t->scale) f.use_div = 1, f.div = (float)k;
  }
  return f;
}
static inline float tofl_apply(const tofl *f, float v) {
  float r = f->use_div ? v / f->div : v * f->scale;
  return r + f->shift;
}

static int check_normalize(const ts_transform *t, int j, const ts_tensor *x, int64_t *C) {
  if (t->nch < 1 || t->nch > 8) return tf_err(TS_EINVAL, t, j, x, "nch %d not in 1..8", t->nch);
  for (int c = 0; c < t->nch; c++)
    if (!(fabsf(t->std[c]) >= FLT_MIN) || !isfinite(t->std[c]))
      return tf_err(TS_EINVAL, t, j, x, "std[%d] is %g (must be a normal, finite f32: 0, denormal and inf make the "
                    "inputs inf or NaN)", c, (double)t->std[c]);
  int64_t ch;
  if (x->shape.ndim == 2) ch = 1;
  else if (x->shape.ndim == 3) ch = t->chw ? x->shape.dims[0] : x->shape.dims[2];
  else return tf_err(TS_ESHAPE, t, j, x, "expected an image of 2 or 3 dimensions");
  if (ch != t->nch)
    return tf_err(TS_ESHAPE, t, j, x, "%lld channels (%s layout) but mean/std for %d", (long long)ch,
                  t->chw ? "CHW" : "HWC", t->nch);
  *C = ch;
  return TS_OK;
}

/* Fused to_float + normalize [+ hwc_to_chw] on u8: a per-channel table of the exact f32 values
 * the separate transforms compute, so the result is bitwise identical. */
static int fused_tofloat_normalize(ts_tensor *x, const ts_transform *tf, const ts_transform *tn, int64_t C,
                                   int to_chw) {
  float lut[8 * 256];
  tofl f = tofl_make(tf);
  for (int64_t c = 0; c < C; c++)
    for (int v = 0; v < 256; v++) lut[c * 256 + v] = (tofl_apply(&f, (float)v) - tn->mean[c]) / tn->std[c];
  ts_shape shp = x->shape;
  const int64_t n = ts_shape_numel(&shp);
  if (to_chw) {
    if (shp.ndim == 2) shp = ts_shape3(1, shp.dims[0], shp.dims[1]);
    else shp = ts_shape3(shp.dims[2], shp.dims[0], shp.dims[1]);
  }
  ts_tensor y;
  int rc = new_tensor(&y, TS_F32, shp);
  if (rc) return rc;
  const uint8_t *s = x->data;
  float *d = y.data;
  if (C == 1) {
    for (int64_t i = 0; i < n; i++) d[i] = lut[s[i]];
  } else if (to_chw) {
    const int64_t P = n / C;
    if (C == 3) {
      float *d0 = d, *d1 = d + P, *d2 = d + 2 * P;
      for (int64_t p = 0; p < P; p++) {
        d0[p] = lut[s[3 * p]];
        d1[p] = lut[256 + s[3 * p + 1]];
        d2[p] = lut[512 + s[3 * p + 2]];
      }
    } else {
      for (int64_t p = 0; p < P; p++)
        for (int64_t c = 0; c < C; c++) d[c * P + p] = lut[c * 256 + s[p * C + c]];
    }
  } else if (tn->chw) { /* CHW u8 input */
    const int64_t P = n / C;
    for (int64_t c = 0; c < C; c++)
      for (int64_t p = 0; p < P; p++) d[c * P + p] = lut[c * 256 + s[c * P + p]];
  } else {
    const int64_t P = n / C;
    for (int64_t p = 0; p < P; p++)
      for (int64_t c = 0; c < C; c++) d[p * C + c] = lut[c * 256 + s[p * C + c]];
  }
  replace(x, &y);
  return TS_OK;
}

static void hwc_to_chw_copy(const uint8_t *s, uint8_t *d, int64_t P, int64_t C, size_t es) {
#define T_LOOP(T)                                                                   \
  {                                                                                 \
    const T *ss = (const T *)s;                                                     \
    T *dd = (T *)d;                                                                 \
    if (C == 3) {                                                                   \
      for (int64_t p = 0; p < P; p++) {                                             \
        dd[p] = ss[3 * p], dd[P + p] = ss[3 * p + 1], dd[2 * P + p] = ss[3 * p + 2]; \
      }                                                                             \
    } else {                                                                        \
      for (int64_t p = 0; p < P; p++)                                               \
        for (int64_t c = 0; c < C; c++) dd[c * P + p] = ss[p * C + c];              \
    }                                                                               \
  }
  switch (es) {
    case 1: T_LOOP(uint8_t) break;
    case 2: T_LOOP(uint16_t) break;
    case 4: T_LOOP(uint32_t) break;
    default: T_LOOP(uint64_t) break;
  }
#undef T_LOOP
}

/* ---- apply ---- */

static int apply_one(const ts_transform *t, int j, int n, ts_tensor *x, uint64_t key, ts_tf_draw *dr,
                     int *consumed, const ts_transform *all) {
  geo g;
  *consumed = 1;
  dr->applied = 1;
  switch (t->kind) {
    case TS_TF_RANDOM_CROP: {
      if (get_geo(x, t->chw, &g)) return tf_err(TS_ESHAPE, t, j, x, "expected an image of 2 or 3 dimensions");
      if (t->h <= 0 || t->w <= 0 || t->pad < 0)
        return tf_err(TS_EINVAL, t, j, x, "bad size (%d,%d) or padding %d", t->h, t->w, t->pad);
      int64_t Hp = g.H + 2 * (int64_t)t->pad, Wp = g.W + 2 * (int64_t)t->pad;
      if (t->h > Hp || t->w > Wp)
        return tf_err(TS_ESHAPE, t, j, x, "crop (%d,%d) is larger than the padded image (%lld,%lld) (pad %d)",
                      t->h, t->w, (long long)Hp, (long long)Wp, t->pad);
      int64_t top = 0, left = 0;
      if (!(Hp == t->h && Wp == t->w)) {
        ts_philox_out o = draw(key, j, 0);
        top = randint(o.v[0], Hp - t->h + 1);
        left = randint(o.v[1], Wp - t->w + 1);
      }
      dr->top = (int)top, dr->left = (int)left, dr->h = t->h, dr->w = t->w;
      return do_crop(x, t->chw, &g, top - t->pad, left - t->pad, t->h, t->w);
    }
    case TS_TF_CENTER_CROP: {
      if (get_geo(x, t->chw, &g)) return tf_err(TS_ESHAPE, t, j, x, "expected an image of 2 or 3 dimensions");
      if (t->h <= 0 || t->w <= 0) return tf_err(TS_EINVAL, t, j, x, "bad size (%d,%d)", t->h, t->w);
      /* torchvision: pad (left/top get the floor half) when the crop is larger, then round((H-h)/2) */
      int64_t H = g.H, W = g.W, pt = 0, pl = 0;
      if (t->h > H || t->w > W) {
        if (t->h > H) pt = (t->h - H) / 2, H = t->h;
        if (t->w > W) pl = (t->w - W) / 2, W = t->w;
      }
      int64_t top = (int64_t)nearbyint((double)(H - t->h) / 2.0) - pt;
      int64_t left = (int64_t)nearbyint((double)(W - t->w) / 2.0) - pl;
      dr->top = (int)top, dr->left = (int)left, dr->h = t->h, dr->w = t->w;
      if (top == 0 && left == 0 && t->h == g.H && t->w == g.W) return TS_OK;
      return do_crop(x, t->chw, &g, top, left, t->h, t->w);
    }
    case TS_TF_RESIZE: {
      if (get_geo(x, t->chw, &g)) return tf_err(TS_ESHAPE, t, j, x, "expected an image of 2 or 3 dimensions");
      if (t->h <= 0 || t->w <= 0) return tf_err(TS_EINVAL, t, j, x, "bad size (%d,%d)", t->h, t->w);
      if (x->dtype != TS_U8 && x->dtype != TS_F32)
        return tf_err(TS_EDTYPE, t, j, x, "bilinear resize supports u8 and f32 images");
      if (g.H == 0 || g.W == 0) return tf_err(TS_ESHAPE, t, j, x, "empty image");
      if (g.H == t->h && g.W == t->w) return TS_OK;
      int rc = do_resize(x, t->chw, &g, t->h, t->w);
      if (rc == TS_ENOMEM) { /* the size asked for, named: not the allocator's byte count alone */
        char hb[32];
        double nb = (double)g.outer * (double)t->h * (double)t->w * (double)g.inner * (double)g.es;
        return tf_err(rc, t, j, x, "resizing to %dx%d needs %s per sample (%.0f bytes), which cannot be allocated",
                      t->h, t->w, ts__human_bytes(nb, hb, sizeof hb), nb);
      }
      return rc;
    }
    case TS_TF_HFLIP:
    case TS_TF_VFLIP: {
      if (get_geo(x, t->chw, &g)) return tf_err(TS_ESHAPE, t, j, x, "expected an image of 2 or 3 dimensions");
      dr->applied = ts_u32_to_unit(draw(key, j, 0).v[0]) < t->p;
      if (!dr->applied) return TS_OK;
      const size_t pix = (size_t)g.inner * g.es;
      if (t->kind == TS_TF_HFLIP) {
        hflip_rows(x->data, g.outer * g.H, g.W, pix);
        return TS_OK;
      }
      ts_tensor y;
      int rc = new_tensor(&y, x->dtype, x->shape);
      if (rc) return rc;
      const size_t row = (size_t)g.W * pix;
      for (int64_t o = 0; o < g.outer; o++)
        for (int64_t r = 0; r < g.H; r++)
          memcpy((uint8_t *)y.data + ((size_t)o * (size_t)g.H + (size_t)r) * row,
                 (const uint8_t *)x->data + ((size_t)o * (size_t)g.H + (size_t)(g.H - 1 - r)) * row, row);
      replace(x, &y);
      return TS_OK;
    }
    case TS_TF_TO_FLOAT: {
      /* fused fast path: u8 -> to_float -> normalize [-> hwc_to_chw] */
      if (x->dtype == TS_U8 && j + 1 < n && all[j + 1].kind == TS_TF_NORMALIZE) {
        int64_t C;
        int rc = check_normalize(&all[j + 1], j + 1, x, &C);
        if (rc) return rc;
        int to_chw = !all[j + 1].chw && x->shape.ndim >= 2 && j + 2 < n && all[j + 2].kind == TS_TF_HWC_TO_CHW;
        if (x->shape.ndim == 2) to_chw = j + 2 < n && all[j + 2].kind == TS_TF_HWC_TO_CHW;
        *consumed = 2 + to_chw;
        return fused_tofloat_normalize(x, t, &all[j + 1], C, to_chw);
      }
      tofl f = tofl_make(t);
      const int64_t m = ts_tensor_numel(x);
      if (x->dtype == TS_U8) {
        float lut[256];
        for (int v = 0; v < 256; v++) lut[v] = tofl_apply(&f, (float)v);
        ts_tensor y;
        int rc = new_tensor(&y, TS_F32, x->shape);
        if (rc) return rc;
        const uint8_t *s = x->data;
        float *d = y.data;
        for (int64_t i = 0; i < m; i++) d[i] = lut[s[i]];
        replace(x, &y);
        return TS_OK;
      }
      if (x->dtype != TS_F32) {
        ts_tensor y;
        int rc = new_tensor(&y, TS_F32, x->shape);
        if (rc) return rc;
        rc = ts_convert(x->data, x->dtype, y.data, TS_F32, (size_t)m);
        if (rc) {
          ts_tensor_free(&y);
          return rc;
        }
        replace(x, &y);
      }
      float *d = x->data;
      for (int64_t i = 0; i < m; i++) d[i] = tofl_apply(&f, d[i]);
      return TS_OK;
    }
    case TS_TF_NORMALIZE: {
      int64_t C;
      int rc = check_normalize(t, j, x, &C);
      if (rc) return rc;
      if (x->dtype != TS_F32) return tf_err(TS_EDTYPE, t, j, x, "normalize needs f32 (apply to_float first)");
      float *d = x->data;
      const int64_t m = ts_tensor_numel(x), P = m / C;
      if (t->chw || C == 1) {
        for (int64_t c = 0; c < C; c++) {
          const float mu = t->mean[c], sd = t->std[c];
          float *p = d + c * P;
          for (int64_t i = 0; i < P; i++) p[i] = (p[i] - mu) / sd;
        }
      } else {
        for (int64_t p = 0; p < P; p++)
          for (int64_t c = 0; c < C; c++) d[p * C + c] = (d[p * C + c] - t->mean[c]) / t->std[c];
      }
      return TS_OK;
    }
    case TS_TF_HWC_TO_CHW: {
      if (x->shape.ndim == 2) {
        x->shape = ts_shape3(1, x->shape.dims[0], x->shape.dims[1]);
        return TS_OK;
      }
      if (x->shape.ndim != 3) return tf_err(TS_ESHAPE, t, j, x, "expected (H,W,C) or (H,W)");
      const int64_t H = x->shape.dims[0], W = x->shape.dims[1], C = x->shape.dims[2];
      if (C == 1) {
        x->shape = ts_shape3(1, H, W);
        return TS_OK;
      }
      ts_tensor y;
      int rc = new_tensor(&y, x->dtype, ts_shape3(C, H, W));
      if (rc) return rc;
      hwc_to_chw_copy(x->data, y.data, H * W, C, ts_dtype_size(x->dtype));
      replace(x, &y);
      return TS_OK;
    }
    case TS_TF_CAST: {
      if (!ts_dtype_size(t->dtype)) return tf_err(TS_EDTYPE, t, j, x, "invalid target dtype %d", (int)t->dtype);
      if (x->dtype == t->dtype) return TS_OK;
      ts_tensor y;
      int rc = new_tensor(&y, t->dtype, x->shape);
      if (rc) return rc;
      rc = ts_convert(x->data, x->dtype, y.data, t->dtype, (size_t)ts_tensor_numel(x));
      if (rc) {
        ts_tensor_free(&y);
        return rc;
      }
      replace(x, &y);
      return TS_OK;
    }
    case TS_TF_RANDOM_ERASING: {
      if (get_geo(x, t->chw, &g)) return tf_err(TS_ESHAPE, t, j, x, "expected an image of 2 or 3 dimensions");
      const float s0 = t->erase_scale[0], s1 = t->erase_scale[1];
      const float r0 = t->erase_ratio[0], r1 = t->erase_ratio[1];
      if (!(s0 >= 0 && s0 <= s1 && s1 <= 1) || !(r0 > 0 && r0 <= r1))
        return tf_err(TS_EINVAL, t, j, x, "bad scale (%g,%g) or ratio (%g,%g)", (double)s0, (double)s1,
                      (double)r0, (double)r1);
      dr->h = dr->w = 0;
      dr->applied = ts_u32_to_unit(draw(key, j, 0).v[0]) < t->p;
      if (!dr->applied) return TS_OK;
      const double area = (double)(g.H * g.W);
      const float lr0 = logf(r0), lr1 = logf(r1);
      for (int a = 0; a < 10; a++) {
        ts_philox_out o = draw(key, j, 1 + (uint64_t)a);
        float sc = s0 + (s1 - s0) * ts_u32_to_unit(o.v[0]);
        float ar = expf(lr0 + (lr1 - lr0) * ts_u32_to_unit(o.v[1]));
        double ea = area * (double)sc;
        int64_t h = (int64_t)nearbyint(sqrt(ea * (double)ar)); /* Python round: half to even */
        int64_t w = (int64_t)nearbyint(sqrt(ea / (double)ar));
        if (!(h < g.H && w < g.W)) continue;
        int64_t top = randint(o.v[2], g.H - h + 1), left = randint(o.v[3], g.W - w + 1);
        dr->top = (int)top, dr->left = (int)left, dr->h = (int)h, dr->w = (int)w;
        const size_t pix = (size_t)g.inner * g.es, row = (size_t)g.W * pix;
        for (int64_t o2 = 0; o2 < g.outer; o2++)
          for (int64_t y = top; y < top + h; y++)
            memset((uint8_t *)x->data + ((size_t)o2 * (size_t)g.H + (size_t)y) * row + (size_t)left * pix, 0,
                   (size_t)w * pix);
        return TS_OK;
      }
      return TS_OK; /* no attempt fitted: unchanged, as torchvision */
    }
  }
  return tf_err(TS_EINVAL, t, j, x, "unknown transform kind %d", (int)t->kind);
}

int ts__transforms_apply_traced(const ts_transform *t, int n, ts_sample *s, uint64_t key, ts_tf_draw *draws) {
  if (!s || (n > 0 && !t)) return ts_error_set(TS_EINVAL, "ts_transforms_apply: NULL argument");
  if (n > 0 && !s->data.data) return ts_error_set(TS_EINVAL, "ts_transforms_apply: sample has no data");
  for (int j = 0; j < n;) {
    ts_tf_draw dr[1];
    memset(dr, 0, sizeof dr);
    int consumed = 1;
    int rc = apply_one(&t[j], j, n, &s->data, key, &dr[0], &consumed, t);
    if (rc == TS_ENOMEM && !strstr(ts_last_error(), tf_name(t[j].kind))) { /* name the transform */
      char why[512];
      snprintf(why, sizeof why, "%s", ts_last_error());
      return tf_err(rc, &t[j], j, &s->data, "%s", why);
    }
    if (rc) return rc;
    if (draws) { /* a fused run (to_float + normalize [+ hwc_to_chw]) draws nothing */
      draws[j] = dr[0];
      for (int k = 1; k < consumed; k++) draws[j + k] = (ts_tf_draw){1, 0, 0, 0, 0};
    }
    j += consumed;
  }
  return TS_OK;
}

int ts_transforms_apply(const ts_transform *t, int n, ts_sample *s, uint64_t key) {
  return ts__transforms_apply_traced(t, n, s, key, NULL);
}
