/* Transforms against torchvision 0.14 (tests/fixtures/tf_*.safetensors, scripts/make_fixtures.py
 * part `vision`). Random transforms: the draws ts_transforms_apply made are read back through
 * ts__transforms_apply_traced and the output is compared with torchvision's functional op at
 * those parameters (every crop offset has a fixture). Also: determinism of the draws, CHW and f32
 * variants, the fused to_float+normalize+hwc_to_chw path against the separate transforms, and
 * errors naming the transform and the sample shape. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/transform_internal.h"
#include "tessera/data.h"
#include "tessera/io.h"
#include "test_util.h"

static ts_st_file *open_fx(const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", TS_FIXTURE_DIR, name);
  ts_st_file *f = NULL;
  int rc = ts_st_open(path, &f);
  CHECK_MSG(rc == TS_OK, "%s: %s", path, ts_last_error());
  return f;
}

static ts_tensor fx(ts_st_file *f, const char *name) {
  ts_tensor t;
  memset(&t, 0, sizeof t);
  int rc = ts_st_find(f, name, &t);
  CHECK_MSG(rc == TS_OK, "%s", ts_last_error());
  return t;
}

/* A sample owning a copy of t (converted to dt). */
static ts_sample sample_of(const ts_tensor *t, ts_dtype dt) {
  ts_sample s;
  memset(&s, 0, sizeof s);
  s.label = -1;
  ts_tensor_init(&s.data, dt, t->shape);
  ts_convert(t->data, t->dtype, s.data.data, dt, (size_t)ts_tensor_numel(t));
  return s;
}

/* HWC (H,W,C) -> CHW copy, any dtype. */
static ts_sample sample_chw(const ts_tensor *t, ts_dtype dt) {
  ts_sample s = sample_of(t, dt);
  ts_transform tf = ts_tf_hwc_to_chw();
  CHECK_OK(ts_transforms_apply(&tf, 1, &s, 0));
  return s;
}

static int same_tensor(const ts_tensor *a, const void *bdata, ts_dtype bdt, const ts_shape *bshape) {
  if (a->dtype != bdt || !ts_shape_equal(&a->shape, bshape)) return 0;
  return memcmp(a->data, bdata, ts_tensor_nbytes(a)) == 0;
}

static int same(const ts_tensor *a, const ts_tensor *b) { return same_tensor(a, b->data, b->dtype, &b->shape); }

/* ---- random crop: every drawn (top, left) against F.crop(F.pad(img, pad), top, left, h, w) ---- */
static void test_random_crop(void) {
  ts_st_file *f = open_fx("tf_crop.safetensors");
  if (!f) return;
  ts_tensor img = fx(f, "img");
  struct { const char *name; int pad, h, w; } cases[] = {
      {"crop_pad2", 2, 8, 9}, {"crop_pad0", 0, 6, 7}, {"crop_pad4_full", 4, 10, 12}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    ts_tensor ref = fx(f, cases[c].name);
    const int nt = (int)ref.shape.dims[0], nl = (int)ref.shape.dims[1], h = cases[c].h, w = cases[c].w;
    const size_t one = (size_t)h * (size_t)w * 3;
    ts_shape oshape = ts_shape3(h, w, 3), cshape = ts_shape3(3, h, w);
    int *hit = calloc((size_t)(nt * nl), sizeof *hit);
    int bad = 0, badchw = 0, badf = 0;
    ts_transform tf = ts_tf_random_crop(h, w, cases[c].pad);
    for (uint64_t key = 0; key < 2000; key++) {
      ts_sample s = sample_of(&img, TS_U8);
      ts_tf_draw d;
      CHECK_OK(ts__transforms_apply_traced(&tf, 1, &s, key, &d));
      if (d.top < 0 || d.top >= nt || d.left < 0 || d.left >= nl) {
        bad++;
        ts_sample_free(&s);
        continue;
      }
      hit[d.top * nl + d.left]++;
      const uint8_t *r = (const uint8_t *)ref.data + (size_t)(d.top * nl + d.left) * one;
      if (!same_tensor(&s.data, r, TS_U8, &oshape)) bad++;
      ts_sample_free(&s);
      if (key % 8 == 0) { /* the same crop on a CHW image and on f32 */
        ts_transform tc = tf;
        tc.chw = 1;
        ts_sample sc = sample_chw(&img, TS_U8);
        ts_tf_draw dc;
        CHECK_OK(ts__transforms_apply_traced(&tc, 1, &sc, key, &dc));
        ts_tensor rv;
        ts_tensor_view(&rv, TS_U8, oshape, (void *)r);
        ts_sample rc = sample_chw(&rv, TS_U8);
        if (dc.top != d.top || dc.left != d.left || !ts_shape_equal(&sc.data.shape, &cshape) || !same(&sc.data, &rc.data))
          badchw++;
        ts_sample_free(&sc);
        ts_sample_free(&rc);
        ts_sample sf = sample_of(&img, TS_F32);
        CHECK_OK(ts_transforms_apply(&tf, 1, &sf, key));
        ts_sample rf = sample_of(&rv, TS_F32);
        if (!same(&sf.data, &rf.data)) badf++;
        ts_sample_free(&sf);
        ts_sample_free(&rf);
      }
    }
    int missed = 0;
    for (int i = 0; i < nt * nl; i++) missed += hit[i] == 0;
    CHECK_MSG(bad == 0, "%s: %d of 2000 crops differ from torchvision", cases[c].name, bad);
    CHECK_MSG(badchw == 0 && badf == 0, "%s: CHW %d / f32 %d mismatches", cases[c].name, badchw, badf);
    CHECK_MSG(missed == 0, "%s: %d of %d offsets never drawn in 2000 tries", cases[c].name, missed, nt * nl);
    free(hit);
  }
  ts_st_close(f);
}

static void test_center_crop(void) {
  ts_st_file *f = open_fx("tf_center_crop.safetensors");
  if (!f) return;
  ts_tensor img = fx(f, "img");
  int sizes[][2] = {{5, 7}, {4, 4}, {7, 9}, {13, 15}, {12, 9}, {8, 14}, {10, 12}, {1, 1}};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    char name[32];
    snprintf(name, sizeof name, "out_%dx%d", sizes[i][0], sizes[i][1]);
    ts_tensor ref = fx(f, name);
    ts_transform tf = ts_tf_center_crop(sizes[i][0], sizes[i][1]);
    ts_sample s = sample_of(&img, TS_U8);
    CHECK_OK(ts_transforms_apply(&tf, 1, &s, 7));
    CHECK_MSG(same(&s.data, &ref), "center_crop %s differs from torchvision", name);
    ts_sample_free(&s);
    tf.chw = 1; /* CHW layout gives the transposed result */
    ts_sample sc = sample_chw(&img, TS_U8), rc = sample_chw(&ref, TS_U8);
    CHECK_OK(ts_transforms_apply(&tf, 1, &sc, 7));
    CHECK_MSG(same(&sc.data, &rc.data), "center_crop %s (CHW) differs", name);
    ts_sample_free(&sc);
    ts_sample_free(&rc);
  }
  ts_st_close(f);
}

static void test_resize(void) {
  ts_st_file *f = open_fx("tf_resize.safetensors");
  if (!f) return;
  struct { const char *name, *in; int h, w; } cases[] = {
      {"u8_5x6", "img", 5, 6},         {"u8_17x23", "img", 17, 23},      {"u8_10x7", "img", 10, 7},
      {"u8_4x12", "img", 4, 12},       {"u8_1x1", "img", 1, 1},          {"u8big_24x24", "img32", 24, 24},
      {"u8big_48x40", "img32", 48, 40}, {"u8big_7x33", "img32", 7, 33},   {"f32_7x9", "imgf", 7, 9},
      {"f32_15x4", "imgf", 15, 4},     {"f32_20x22", "imgf", 20, 22}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    ts_tensor in = fx(f, cases[i].in), ref = fx(f, cases[i].name);
    ts_transform tf = ts_tf_resize(cases[i].h, cases[i].w);
    ts_sample s = sample_of(&in, in.dtype);
    CHECK_OK(ts_transforms_apply(&tf, 1, &s, 0));
    CHECK_MSG(ts_shape_equal(&s.data.shape, &ref.shape) && s.data.dtype == ref.dtype, "resize %s: shape",
              cases[i].name);
    int64_t n = ts_tensor_numel(&ref);
    if (ref.dtype == TS_U8) { /* u8: exact (f32 math, round half to even) */
      int64_t diff = 0;
      for (int64_t k = 0; k < n; k++) diff += ((uint8_t *)s.data.data)[k] != ((uint8_t *)ref.data)[k];
      CHECK_MSG(diff == 0, "resize %s: %lld of %lld u8 values differ from torchvision", cases[i].name,
                (long long)diff, (long long)n);
    } else {
      CHECK_CLOSE((float *)s.data.data, (float *)ref.data, (size_t)n, 1e-6, 1e-6, cases[i].name);
    }
    /* CHW layout: same values, transposed */
    tf.chw = 1;
    ts_sample sc = sample_chw(&in, in.dtype), rc = sample_chw(&ref, ref.dtype);
    CHECK_OK(ts_transforms_apply(&tf, 1, &sc, 0));
    CHECK_MSG(same(&sc.data, &rc.data) || ref.dtype == TS_F32, "resize %s (CHW) differs", cases[i].name);
    if (ref.dtype == TS_F32)
      CHECK_CLOSE((float *)sc.data.data, (float *)rc.data.data, (size_t)n, 1e-6, 1e-6, cases[i].name);
    ts_sample_free(&sc);
    ts_sample_free(&rc);
    ts_sample_free(&s);
  }
  ts_st_close(f);
}

static void test_flips(void) {
  ts_st_file *f = open_fx("tf_flip.safetensors");
  if (!f) return;
  ts_tensor img = fx(f, "img"), hf = fx(f, "hflip"), vf = fx(f, "vflip");
  ts_transform th = ts_tf_hflip(1.0f), tv = ts_tf_vflip(1.0f);
  ts_sample s = sample_of(&img, TS_U8);
  CHECK_OK(ts_transforms_apply(&th, 1, &s, 1));
  CHECK_MSG(same(&s.data, &hf), "hflip differs from torchvision");
  ts_sample_free(&s);
  s = sample_of(&img, TS_U8);
  CHECK_OK(ts_transforms_apply(&tv, 1, &s, 1));
  CHECK_MSG(same(&s.data, &vf), "vflip differs from torchvision");
  ts_sample_free(&s);
  /* f32 and CHW variants */
  s = sample_of(&img, TS_F32);
  CHECK_OK(ts_transforms_apply(&th, 1, &s, 1));
  ts_sample r = sample_of(&hf, TS_F32);
  CHECK(same(&s.data, &r.data));
  ts_sample_free(&s);
  ts_sample_free(&r);
  ts_transform tc = tv;
  tc.chw = 1;
  s = sample_chw(&img, TS_F32);
  r = sample_chw(&vf, TS_F32);
  CHECK_OK(ts_transforms_apply(&tc, 1, &s, 1));
  CHECK(same(&s.data, &r.data));
  ts_sample_free(&s);
  ts_sample_free(&r);
  tc = th;
  tc.chw = 1;
  s = sample_chw(&img, TS_U8);
  r = sample_chw(&hf, TS_U8);
  CHECK_OK(ts_transforms_apply(&tc, 1, &s, 1));
  CHECK(same(&s.data, &r.data));
  ts_sample_free(&s);
  ts_sample_free(&r);
  /* p = 0.5: the recorded decision matches the output, about half flip, and two flips at
   * different positions with the same key decide independently */
  ts_transform two[2] = {ts_tf_hflip(0.5f), ts_tf_vflip(0.5f)};
  int nh = 0, nv = 0, both = 0, bad = 0;
  for (uint64_t key = 0; key < 1000; key++) {
    ts_sample x = sample_of(&img, TS_U8);
    ts_tf_draw d[2];
    CHECK_OK(ts__transforms_apply_traced(two, 1, &x, key, d));
    if (!same(&x.data, d[0].applied ? &hf : &img)) bad++;
    ts_sample_free(&x);
    x = sample_of(&img, TS_U8);
    CHECK_OK(ts__transforms_apply_traced(two, 2, &x, key, d));
    nh += d[0].applied;
    nv += d[1].applied;
    both += d[0].applied && d[1].applied;
    ts_sample_free(&x);
  }
  CHECK_MSG(bad == 0, "%d flips disagree with their recorded decision", bad);
  CHECK_MSG(nh > 430 && nh < 570 && nv > 430 && nv < 570, "flip rates %d, %d of 1000", nh, nv);
  CHECK_MSG(both > 180 && both < 320, "hflip and vflip not independent: both %d of 1000", both);
  ts_st_close(f);
}

static void test_float_normalize(void) {
  ts_st_file *f = open_fx("tf_normalize.safetensors");
  if (!f) return;
  ts_tensor img = fx(f, "img"), tof = fx(f, "to_float"), nchw = fx(f, "normalized_chw");
  ts_tensor mt = fx(f, "mean"), st = fx(f, "std");
  const float *mean = mt.data, *std = st.data;
  /* to_float(1/255) is torchvision's x / 255, bitwise */
  ts_transform t1 = ts_tf_to_float(1.0f / 255);
  ts_sample s = sample_of(&img, TS_U8);
  CHECK_OK(ts_transforms_apply(&t1, 1, &s, 0));
  CHECK_MSG(same(&s.data, &tof), "to_float(1/255) differs from ConvertImageDtype");
  ts_sample_free(&s);
  /* three ways to CIFAR normalisation, all bitwise equal to torchvision */
  ts_transform fused[3] = {ts_tf_to_float(1.0f / 255), ts_tf_normalize(3, mean, std), ts_tf_hwc_to_chw()};
  ts_transform chwnorm[3] = {ts_tf_to_float(1.0f / 255), ts_tf_hwc_to_chw(), ts_tf_normalize(3, mean, std)};
  chwnorm[2].chw = 1;
  ts_transform viaf32[4] = {ts_tf_cast(TS_F32), ts_tf_to_float(1.0f / 255), ts_tf_normalize(3, mean, std),
                            ts_tf_hwc_to_chw()};
  ts_transform fused_chw[3] = {ts_tf_hwc_to_chw(), ts_tf_to_float(1.0f / 255), ts_tf_normalize(3, mean, std)};
  fused_chw[2].chw = 1;
  struct { ts_transform *t; int n; const char *what; } ways[] = {
      {fused, 3, "fused u8 to_float+normalize+hwc_to_chw"},
      {chwnorm, 3, "to_float, hwc_to_chw, normalize(chw)"},
      {viaf32, 4, "cast f32, to_float, normalize(hwc), hwc_to_chw"},
      {fused_chw, 3, "hwc_to_chw, fused to_float+normalize(chw)"}};
  for (size_t w = 0; w < sizeof ways / sizeof *ways; w++) {
    s = sample_of(&img, TS_U8);
    CHECK_OK(ts_transforms_apply(ways[w].t, ways[w].n, &s, 0));
    CHECK_MSG(same(&s.data, &nchw), "%s differs from torchvision normalize", ways[w].what);
    ts_sample_free(&s);
  }
  /* to_float with scale and shift: x * scale + shift (no torchvision equivalent) */
  ts_transform t2 = ts_tf_to_float(0.5f);
  t2.shift = -1.0f;
  s = sample_of(&img, TS_U8);
  CHECK_OK(ts_transforms_apply(&t2, 1, &s, 0));
  int bad = 0;
  for (int64_t k = 0; k < ts_tensor_numel(&img); k++)
    bad += ((float *)s.data.data)[k] != (float)((uint8_t *)img.data)[k] * 0.5f - 1.0f;
  CHECK_MSG(bad == 0, "to_float(0.5) - 1: %d wrong", bad);
  ts_sample_free(&s);
  /* one channel (MNIST-like (H,W,1) and (H,W)): fused and separate agree */
  ts_tensor g1;
  ts_tensor_view(&g1, TS_U8, ts_shape3(10, 36, 1), img.data);
  float m1 = 0.2860f, s1 = 0.3530f;
  ts_transform a[3] = {ts_tf_to_float(1.0f / 255), ts_tf_normalize(1, &m1, &s1), ts_tf_hwc_to_chw()};
  ts_transform b[3] = {ts_tf_to_float(1.0f / 255), ts_tf_hwc_to_chw(), ts_tf_normalize(1, &m1, &s1)};
  b[2].chw = 1;
  ts_sample sa = sample_of(&g1, TS_U8), sb = sample_of(&g1, TS_U8);
  CHECK_OK(ts_transforms_apply(a, 3, &sa, 0));
  CHECK_OK(ts_transforms_apply(b, 3, &sb, 0));
  ts_shape e1 = ts_shape3(1, 10, 36);
  CHECK(ts_shape_equal(&sa.data.shape, &e1) && same(&sa.data, &sb.data));
  ts_sample_free(&sa);
  ts_sample_free(&sb);
  ts_tensor g2;
  ts_tensor_view(&g2, TS_U8, ts_shape2(10, 36), img.data);
  sa = sample_of(&g2, TS_U8);
  sb = sample_of(&g1, TS_U8);
  CHECK_OK(ts_transforms_apply(a, 3, &sa, 0));
  CHECK_OK(ts_transforms_apply(b, 3, &sb, 0));
  CHECK(ts_shape_equal(&sa.data.shape, &e1) && same(&sa.data, &sb.data));
  ts_sample_free(&sa);
  ts_sample_free(&sb);
  ts_st_close(f);
}

/* Reference erase: zero the box in every channel of a CHW image. */
static void erase_ref(float *x, int C, int H, int W, int top, int left, int h, int w) {
  for (int c = 0; c < C; c++)
    for (int y = top; y < top + h; y++)
      for (int k = left; k < left + w; k++) x[(c * H + y) * W + k] = 0.0f;
}

static void test_erasing(void) {
  ts_st_file *f = open_fx("tf_erase.safetensors");
  if (!f) return;
  ts_tensor img = fx(f, "img"); /* (3,10,12) f32 */
  const int C = 3, H = 10, W = 12;
  /* the reference box semantics (top row, left column, height, width) equal torchvision's */
  int boxes[][4] = {{2, 3, 4, 5}, {0, 0, 9, 11}, {5, 7, 5, 5}, {3, 0, 1, 12}};
  for (size_t i = 0; i < sizeof boxes / sizeof *boxes; i++) {
    char name[64];
    snprintf(name, sizeof name, "erase_%d_%d_%d_%d", boxes[i][0], boxes[i][1], boxes[i][2], boxes[i][3]);
    ts_tensor ref = fx(f, name);
    ts_sample s = sample_of(&img, TS_F32);
    erase_ref(s.data.data, C, H, W, boxes[i][0], boxes[i][1], boxes[i][2], boxes[i][3]);
    CHECK_MSG(same(&s.data, &ref), "reference erase %s differs from torchvision F.erase", name);
    ts_sample_free(&s);
  }
  /* random erasing: the output is the input with the drawn box zeroed */
  ts_transform te = ts_tf_random_erasing(0.5f);
  int applied = 0, erased = 0, bad = 0, badbox = 0;
  for (uint64_t key = 0; key < 1000; key++) {
    ts_sample s = sample_of(&img, TS_F32), r = sample_of(&img, TS_F32);
    ts_tf_draw d;
    CHECK_OK(ts__transforms_apply_traced(&te, 1, &s, key, &d));
    applied += d.applied;
    if (d.applied && d.h > 0) {
      erased++;
      if (d.top < 0 || d.left < 0 || d.h >= H || d.w >= W || d.top + d.h > H || d.left + d.w > W) badbox++;
      else erase_ref(r.data.data, C, H, W, d.top, d.left, d.h, d.w);
    }
    if (!same(&s.data, &r.data)) bad++;
    ts_sample_free(&s);
    ts_sample_free(&r);
  }
  CHECK_MSG(bad == 0 && badbox == 0, "random erasing: %d outputs differ, %d bad boxes", bad, badbox);
  CHECK_MSG(applied > 430 && applied < 570, "random erasing p=0.5 applied %d of 1000", applied);
  CHECK_MSG(erased > applied * 8 / 10, "only %d of %d erasings found a box", erased, applied);
  /* the box distribution on a large image: area in scale (0.02, 0.33), aspect in (0.3, 3.3) */
  ts_sample big;
  memset(&big, 0, sizeof big);
  ts_transform t1 = ts_tf_random_erasing(1.0f);
  double min_a = 1, max_a = 0, min_r = 100, max_r = 0, sum_lr = 0;
  int n = 0;
  for (uint64_t key = 0; key < 2000; key++) {
    ts_tensor_init(&big.data, TS_F32, ts_shape3(1, 200, 200));
    ts_tf_draw d;
    CHECK_OK(ts__transforms_apply_traced(&t1, 1, &big, key, &d));
    ts_sample_free(&big);
    if (!d.h) continue;
    double a = (double)d.h * d.w / 40000.0, r = (double)d.h / d.w;
    min_a = fmin(min_a, a), max_a = fmax(max_a, a), min_r = fmin(min_r, r), max_r = fmax(max_r, r);
    sum_lr += log(r);
    n++;
  }
  CHECK_MSG(n > 1900, "only %d of 2000 found a box on a 200x200 image", n);
  CHECK_MSG(min_a > 0.018 && min_a < 0.03 && max_a < 0.34 && max_a > 0.30, "erased area fraction in [%g, %g]",
            min_a, max_a);
  CHECK_MSG(min_r > 0.28 && min_r < 0.35 && max_r < 3.5 && max_r > 2.8, "aspect ratio in [%g, %g]", min_r, max_r);
  CHECK_MSG(fabs(sum_lr / n) < 0.1, "mean log aspect %g (log-uniform is symmetric)", sum_lr / n);
  /* no box fits (scale >= 0.9 of a 10x12 image): unchanged, as torchvision after 10 attempts */
  ts_transform tn = ts_tf_random_erasing(1.0f);
  tn.erase_scale[0] = 0.9f, tn.erase_scale[1] = 1.0f;
  for (uint64_t key = 0; key < 50; key++) {
    ts_sample s = sample_of(&img, TS_F32);
    ts_tf_draw d;
    CHECK_OK(ts__transforms_apply_traced(&tn, 1, &s, key, &d));
    CHECK(d.applied == 1 && d.h == 0 && same(&s.data, &img));
    ts_sample_free(&s);
  }
  ts_st_close(f);
}

static void test_cast_and_determinism(void) {
  float v[6] = {-3.7f, -0.5f, 0.0f, 1.9f, 254.6f, 300.0f};
  ts_tensor t;
  ts_tensor_view(&t, TS_F32, ts_shape3(1, 2, 3), v);
  ts_sample s = sample_of(&t, TS_F32);
  ts_transform c = ts_tf_cast(TS_U8);
  CHECK_OK(ts_transforms_apply(&c, 1, &s, 0));
  uint8_t e[6] = {0, 0, 0, 1, 254, 255}; /* truncation toward zero, saturating (ts_convert) */
  CHECK(s.data.dtype == TS_U8 && memcmp(s.data.data, e, 6) == 0);
  ts_sample_free(&s);
  s = sample_of(&t, TS_F32);
  c = ts_tf_cast(TS_BF16);
  CHECK_OK(ts_transforms_apply(&c, 1, &s, 0));
  CHECK(s.data.dtype == TS_BF16 && ts_bf16_to_f32(((uint16_t *)s.data.data)[3]) == ts_bf16_to_f32(ts_f32_to_bf16(1.9f)));
  ts_sample_free(&s);

  /* a CIFAR chain: same key, same output; the draws depend on (key, position) only */
  uint8_t pix[32 * 32 * 3];
  for (int i = 0; i < (int)sizeof pix; i++) pix[i] = (uint8_t)(i * 37 + 11);
  ts_tensor im;
  ts_tensor_view(&im, TS_U8, ts_shape3(32, 32, 3), pix);
  const float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.25f, 0.25f, 0.25f};
  ts_transform chain[6] = {ts_tf_random_crop(32, 32, 4), ts_tf_hflip(0.5f), ts_tf_to_float(1.0f / 255),
                           ts_tf_normalize(3, mean, std), ts_tf_hwc_to_chw(), ts_tf_random_erasing(0.5f)};
  int differ = 0;
  for (uint64_t key = 100; key < 140; key++) {
    ts_sample a = sample_of(&im, TS_U8), b = sample_of(&im, TS_U8), c2 = sample_of(&im, TS_U8);
    ts_tf_draw da[6], dc[2];
    CHECK_OK(ts__transforms_apply_traced(chain, 6, &a, key, da));
    CHECK_OK(ts_transforms_apply(chain, 6, &b, key));
    CHECK(same(&a.data, &b.data));
    ts_shape e3 = ts_shape3(3, 32, 32);
    CHECK(ts_shape_equal(&a.data.shape, &e3) && a.data.dtype == TS_F32);
    /* a prefix of the chain draws the same as the full chain */
    CHECK_OK(ts__transforms_apply_traced(chain, 2, &c2, key, dc));
    CHECK(dc[0].top == da[0].top && dc[0].left == da[0].left && dc[1].applied == da[1].applied);
    ts_sample o = sample_of(&im, TS_U8);
    CHECK_OK(ts_transforms_apply(chain, 6, &o, key + 1000));
    differ += !same(&a.data, &o.data);
    ts_sample_free(&a);
    ts_sample_free(&b);
    ts_sample_free(&c2);
    ts_sample_free(&o);
  }
  CHECK_MSG(differ >= 38, "only %d of 40 keys give a different augmentation", differ);
}

static int msg_has(const char *a, const char *b) {
  const char *m = ts_last_error();
  int ok = strstr(m, a) && (!b || strstr(m, b));
  if (!ok) fprintf(stderr, "unexpected message: %s\n", m);
  return ok;
}

static void test_errors(void) {
  uint8_t pix[10 * 12 * 4] = {0};
  ts_tensor im;
  ts_tensor_view(&im, TS_U8, ts_shape3(10, 12, 4), pix);
  const float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.25f, 0.25f, 0.25f};
  ts_sample s = sample_of(&im, TS_U8);
  ts_transform crop = ts_tf_random_crop(16, 12, 2);
  CHECK(ts_transforms_apply(&crop, 1, &s, 0) == TS_ESHAPE);
  CHECK(msg_has("random_crop", "(10,12,4)"));
  ts_sample_free(&s);

  s = sample_of(&im, TS_U8);
  ts_transform tn[2] = {ts_tf_to_float(1.0f / 255), ts_tf_normalize(3, mean, std)};
  CHECK(ts_transforms_apply(tn, 2, &s, 0) == TS_ESHAPE); /* fused path */
  CHECK(msg_has("transform 1 (normalize)", "(10,12,4)"));
  ts_sample_free(&s);
  s = sample_of(&im, TS_F32);
  CHECK(ts_transforms_apply(&tn[1], 1, &s, 0) == TS_ESHAPE); /* separate path */
  CHECK(msg_has("normalize", "(10,12,4)"));
  ts_sample_free(&s);
  s = sample_of(&im, TS_U8);
  ts_transform n4 = ts_tf_normalize(4, (float[]){0, 0, 0, 0}, (float[]){1, 1, 1, 1});
  CHECK(ts_transforms_apply(&n4, 1, &s, 0) == TS_EDTYPE);
  CHECK(msg_has("normalize", "u8"));
  n4.std[2] = 0.0f;
  ts_sample_free(&s);
  s = sample_of(&im, TS_F32);
  CHECK(ts_transforms_apply(&n4, 1, &s, 0) == TS_EINVAL);
  CHECK(msg_has("normalize", "std[2]"));
  ts_sample_free(&s);

  s = sample_of(&im, TS_I32);
  ts_transform rz = ts_tf_resize(5, 5);
  CHECK(ts_transforms_apply(&rz, 1, &s, 0) == TS_EDTYPE);
  CHECK(msg_has("resize", "i32"));
  ts_sample_free(&s);

  ts_tensor flat;
  ts_tensor_view(&flat, TS_U8, ts_shape1(480), pix);
  s = sample_of(&flat, TS_U8);
  ts_transform hf = ts_tf_hflip(1.0f);
  CHECK(ts_transforms_apply(&hf, 1, &s, 0) == TS_ESHAPE);
  CHECK(msg_has("hflip", "(480)"));
  ts_sample_free(&s);
  ts_sample empty;
  memset(&empty, 0, sizeof empty);
  CHECK(ts_transforms_apply(&hf, 1, &empty, 0) == TS_EINVAL);
}

int main(void) {
  test_random_crop();
  test_center_crop();
  test_resize();
  test_flips();
  test_float_normalize();
  test_erasing();
  test_cast_and_determinism();
  test_errors();
  return ts_test_finish("test_transform");
}
