// Convolution, pooling and softmax on NCHW (src/kernels/conv.h, pool.h, softmax.h), the
// correctness kernels: one thread per output element summing its terms in a fixed order (direct
// convolution: what runs where cuDNN is not found, src/device/cudnn.c being the fast path). f32, and
// bf16 storage (the ResNets under amp O2/O3: every 16-bit tensor read widened, f32 sums in the same
// order, each output rounded once, as the CPU's 16-bit kernels). Batch norm: batchnorm.cu.
#include "ts_cuda.h"

struct cdesc {
  i64 N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, groups;
};

// x (N,C,H,W), w (O,C/g,KH,KW), b (O) or null -> y (N,O,OH,OW)
template <typename T> DEV void conv_fwd(const T *x, const T *w, const T *b, T *y, cdesc d) {
  i64 n_out = d.N * d.O * d.OH * d.OW, cg = d.C / d.groups, og = d.O / d.groups;
  for (i64 i = gidx(); i < n_out; i += gstride()) {
    i64 ow = i % d.OW, oh = (i / d.OW) % d.OH, o = (i / (d.OW * d.OH)) % d.O, n = i / (d.OW * d.OH * d.O);
    i64 g = o / og;
    float s = b ? ld(b, o) : 0.0f;
    for (i64 c = 0; c < cg; c++)
      for (i64 kh = 0; kh < d.KH; kh++) {
        i64 h = oh * d.sh - d.ph + kh * d.dh;
        if (h < 0 || h >= d.H) continue;
        for (i64 kw = 0; kw < d.KW; kw++) {
          i64 ww = ow * d.sw - d.pw + kw * d.dw;
          if (ww < 0 || ww >= d.W) continue;
          s += ld(x, ((n * d.C + g * cg + c) * d.H + h) * d.W + ww) * ld(w, ((o * cg + c) * d.KH + kh) * d.KW + kw);
        }
      }
    st(y, i, s);
  }
}
KERNEL ts_k_conv2d_fwd_f32(const float *x, const float *w, const float *b, float *y, cdesc d) { conv_fwd(x, w, b, y, d); }
KERNEL ts_k_conv2d_fwd_bf16(const bf16 *x, const bf16 *w, const bf16 *b, bf16 *y, cdesc d) { conv_fwd(x, w, b, y, d); }

// dy (N,O,OH,OW), w -> dx (N,C,H,W)
template <typename T> DEV void conv_bwd_data(const T *dy, const T *w, T *dx, cdesc d) {
  i64 n_in = d.N * d.C * d.H * d.W, cg = d.C / d.groups, og = d.O / d.groups;
  for (i64 i = gidx(); i < n_in; i += gstride()) {
    i64 ww = i % d.W, h = (i / d.W) % d.H, c = (i / (d.W * d.H)) % d.C, n = i / (d.W * d.H * d.C);
    i64 g = c / cg, cl = c % cg;
    float s = 0.0f;
    for (i64 ol = 0; ol < og; ol++) {
      i64 o = g * og + ol;
      for (i64 kh = 0; kh < d.KH; kh++) {
        i64 t = h + d.ph - kh * d.dh;
        if (t < 0 || t % d.sh) continue;
        i64 oh = t / d.sh;
        if (oh >= d.OH) continue;
        for (i64 kw = 0; kw < d.KW; kw++) {
          i64 u = ww + d.pw - kw * d.dw;
          if (u < 0 || u % d.sw) continue;
          i64 ow = u / d.sw;
          if (ow >= d.OW) continue;
          s += ld(dy, ((n * d.O + o) * d.OH + oh) * d.OW + ow) * ld(w, ((o * cg + cl) * d.KH + kh) * d.KW + kw);
        }
      }
    }
    st(dx, i, s);
  }
}
KERNEL ts_k_conv2d_bwd_data_f32(const float *dy, const float *w, float *dx, cdesc d) { conv_bwd_data(dy, w, dx, d); }
KERNEL ts_k_conv2d_bwd_data_bf16(const bf16 *dy, const bf16 *w, bf16 *dx, cdesc d) { conv_bwd_data(dy, w, dx, d); }

// x, dy -> dw (O,C/g,KH,KW); db (O) when not null (threads past the weights do the bias)
template <typename T> DEV void conv_bwd_weight(const T *x, const T *dy, T *dw, T *db, cdesc d) {
  i64 cg = d.C / d.groups, og = d.O / d.groups, nw = d.O * cg * d.KH * d.KW, nt = nw + (db ? d.O : 0);
  for (i64 i = gidx(); i < nt; i += gstride()) {
    if (i >= nw) { // the bias: sum of dy over n, oh, ow
      i64 o = i - nw;
      float s = 0.0f;
      for (i64 n = 0; n < d.N; n++)
        for (i64 p = 0; p < d.OH * d.OW; p++) s += ld(dy, (n * d.O + o) * d.OH * d.OW + p);
      st(db, o, s);
      continue;
    }
    i64 kw = i % d.KW, kh = (i / d.KW) % d.KH, cl = (i / (d.KW * d.KH)) % cg, o = i / (d.KW * d.KH * cg);
    i64 c = (o / og) * cg + cl;
    float s = 0.0f;
    for (i64 n = 0; n < d.N; n++)
      for (i64 oh = 0; oh < d.OH; oh++) {
        i64 h = oh * d.sh - d.ph + kh * d.dh;
        if (h < 0 || h >= d.H) continue;
        for (i64 ow = 0; ow < d.OW; ow++) {
          i64 ww = ow * d.sw - d.pw + kw * d.dw;
          if (ww < 0 || ww >= d.W) continue;
          s += ld(x, ((n * d.C + c) * d.H + h) * d.W + ww) * ld(dy, ((n * d.O + o) * d.OH + oh) * d.OW + ow);
        }
      }
    st(dw, i, s);
  }
}
KERNEL ts_k_conv2d_bwd_weight_f32(const float *x, const float *dy, float *dw, float *db, cdesc d) {
  conv_bwd_weight(x, dy, dw, db, d);
}
KERNEL ts_k_conv2d_bwd_weight_bf16(const bf16 *x, const bf16 *dy, bf16 *dw, bf16 *db, cdesc d) {
  conv_bwd_weight(x, dy, dw, db, d);
}

// A block's walk over the (n, s) positions of one channel of (N, C, S): i = tid, tid + ntid, ...
// below N S as n = i / S, s = i % S, advanced without a division per step (64-bit division is
// slow on a GPU); the same order as the flat index, so the sums are what they were.
struct walk {
  i64 n, s, dn, ds;
};
DEV walk walk_start(i64 S) { return walk{tid() / S, tid() % S, ntid() / S, ntid() % S}; }
DEV void walk_next(walk &w, i64 S) {
  w.n += w.dn, w.s += w.ds;
  if (w.s >= S) w.s -= S, w.n++;
}

// the bias around cuDNN's convolutions (src/device/cudnn.c): y (N,O,S) = b[o] before the
// convolution adds to it; db (O) = the sum of dy over n and s, one block per channel, a fixed tree
template <typename T> DEV void conv_bias_fill(const T *b, T *y, i64 N, i64 O, i64 S) {
  for (i64 i = gidx(); i < N * O * S; i += gstride()) st(y, i, ld(b, (i / S) % O));
}
KERNEL ts_k_conv_bias_fill_f32(const float *b, float *y, i64 N, i64 O, i64 S) { conv_bias_fill(b, y, N, O, S); }
KERNEL ts_k_conv_bias_fill_bf16(const bf16 *b, bf16 *y, i64 N, i64 O, i64 S) { conv_bias_fill(b, y, N, O, S); }
KERNEL ts_k_conv_bias_fill_f16(const half16 *b, half16 *y, i64 N, i64 O, i64 S) { conv_bias_fill(b, y, N, O, S); }
template <typename T> DEV void conv_bias_grad(const T *dy, T *db, i64 N, i64 O, i64 S) {
  __shared__ float sh[32];
  for (i64 o = bid(); o < O; o += nbid()) {
    float s = 0.0f;
    for (walk w = walk_start(S); w.n < N; walk_next(w, S)) s += ld(dy, (w.n * O + o) * S + w.s);
    s = block_sum(s, sh);
    if (tid() == 0) st(db, o, s);
  }
}
KERNEL ts_k_conv_bias_grad_f32(const float *dy, float *db, i64 N, i64 O, i64 S) { conv_bias_grad(dy, db, N, O, S); }
KERNEL ts_k_conv_bias_grad_bf16(const bf16 *dy, bf16 *db, i64 N, i64 O, i64 S) { conv_bias_grad(dy, db, N, O, S); }
KERNEL ts_k_conv_bias_grad_f16(const half16 *dy, half16 *db, i64 N, i64 O, i64 S) { conv_bias_grad(dy, db, N, O, S); }

struct pdesc {
  i64 N, C, H, W, OH, OW, kh, kw, sh, sw, ph, pw, cl; // cl: NHWC (channels last), else NCHW
};
// element i of an (N, C, h, w) tensor in the pooling's layout: its coordinates; and the offset of
// (n, c, y, x) there (NHWC: the same values in the same order, only the addresses move)
DEV void pool_at(const pdesc &d, i64 i, i64 h, i64 w, i64 &n, i64 &c, i64 &y, i64 &x) {
  if (d.cl) c = i % d.C, x = (i / d.C) % w, y = (i / (d.C * w)) % h, n = i / (d.C * w * h);
  else x = i % w, y = (i / w) % h, c = (i / (w * h)) % d.C, n = i / (w * h * d.C);
}
DEV i64 pool_off(const pdesc &d, i64 h, i64 w, i64 n, i64 c, i64 y, i64 x) {
  return d.cl ? ((n * h + y) * w + x) * d.C + c : ((n * d.C + c) * h + y) * w + x;
}

// max pooling: y and the window index of the first maximum (i * kw + j) in ws; padding never wins
template <typename T> DEV void maxpool_fwd(const T *x, T *y, unsigned char *ws, pdesc d) {
  i64 n_out = d.N * d.C * d.OH * d.OW;
  for (i64 i = gidx(); i < n_out; i += gstride()) {
    i64 n, c, oh, ow;
    pool_at(d, i, d.OH, d.OW, n, c, oh, ow);
    float m = -3.402823466e38f;
    int best = -1;
    for (i64 a = 0; a < d.kh; a++) {
      i64 h = oh * d.sh - d.ph + a;
      if (h < 0 || h >= d.H) continue;
      for (i64 b = 0; b < d.kw; b++) {
        i64 w = ow * d.sw - d.pw + b;
        if (w < 0 || w >= d.W) continue;
        float v = ld(x, pool_off(d, d.H, d.W, n, c, h, w));
        if (best < 0 || v > m) m = v, best = (int)(a * d.kw + b);
      }
    }
    st(y, i, m); // a bf16 input's maximum is exact in bf16
    ws[i] = (unsigned char)(best < 0 ? 0 : best);
  }
}
KERNEL ts_k_maxpool_fwd_f32(const float *x, float *y, unsigned char *ws, pdesc d) { maxpool_fwd(x, y, ws, d); }
KERNEL ts_k_maxpool_fwd_bf16(const bf16 *x, bf16 *y, unsigned char *ws, pdesc d) { maxpool_fwd(x, y, ws, d); }
// dx (one thread per input element): the dy of every window whose maximum it was, windows in order
// the outputs along one axis whose windows cover input position p (window k, stride st, padding
// pd, n outputs): [lo, hi] (empty when lo > hi), in increasing order as a loop over every output
// would meet them: the backward kernels' sums are the same, without a pass over every output
DEV void pool_span(i64 p, i64 k, i64 st, i64 pd, i64 n, i64 &lo, i64 &hi) {
  i64 x = p + pd - k + 1; // the first output o with o st > p + pd - k
  lo = x <= 0 ? 0 : (x + st - 1) / st;
  hi = (p + pd) / st;
  if (hi > n - 1) hi = n - 1;
}
template <typename T> DEV void maxpool_bwd(const T *dy, const unsigned char *ws, T *dx, pdesc d) {
  i64 n_in = d.N * d.C * d.H * d.W;
  for (i64 i = gidx(); i < n_in; i += gstride()) {
    i64 n, c, h, w;
    pool_at(d, i, d.H, d.W, n, c, h, w);
    float s = 0.0f;
    i64 oh0, oh1, ow0, ow1;
    pool_span(h, d.kh, d.sh, d.ph, d.OH, oh0, oh1);
    pool_span(w, d.kw, d.sw, d.pw, d.OW, ow0, ow1);
    for (i64 oh = oh0; oh <= oh1; oh++) {
      i64 a = h - (oh * d.sh - d.ph);
      if (a < 0 || a >= d.kh) continue;
      for (i64 ow = ow0; ow <= ow1; ow++) {
        i64 b = w - (ow * d.sw - d.pw);
        if (b < 0 || b >= d.kw) continue;
        i64 o = pool_off(d, d.OH, d.OW, n, c, oh, ow);
        if (ws[o] == a * d.kw + b) s += ld(dy, o);
      }
    }
    st(dx, i, s);
  }
}
KERNEL ts_k_maxpool_bwd_f32(const float *dy, const unsigned char *ws, float *dx, pdesc d) { maxpool_bwd(dy, ws, dx, d); }
KERNEL ts_k_maxpool_bwd_bf16(const bf16 *dy, const unsigned char *ws, bf16 *dx, pdesc d) { maxpool_bwd(dy, ws, dx, d); }
// average pooling without the padding in the divisor
template <typename T> DEV void avgpool_fwd(const T *x, T *y, pdesc d) {
  i64 n_out = d.N * d.C * d.OH * d.OW;
  for (i64 i = gidx(); i < n_out; i += gstride()) {
    i64 n, c, oh, ow;
    pool_at(d, i, d.OH, d.OW, n, c, oh, ow);
    float s = 0.0f;
    int cnt = 0;
    for (i64 a = 0; a < d.kh; a++) {
      i64 h = oh * d.sh - d.ph + a;
      if (h < 0 || h >= d.H) continue;
      for (i64 b = 0; b < d.kw; b++) {
        i64 w = ow * d.sw - d.pw + b;
        if (w < 0 || w >= d.W) continue;
        s += ld(x, pool_off(d, d.H, d.W, n, c, h, w));
        cnt++;
      }
    }
    st(y, i, cnt ? s / (float)cnt : 0.0f);
  }
}
KERNEL ts_k_avgpool_fwd_f32(const float *x, float *y, pdesc d) { avgpool_fwd(x, y, d); }
KERNEL ts_k_avgpool_fwd_bf16(const bf16 *x, bf16 *y, pdesc d) { avgpool_fwd(x, y, d); }
template <typename T> DEV void avgpool_bwd(const T *dy, T *dx, pdesc d) {
  i64 n_in = d.N * d.C * d.H * d.W;
  for (i64 i = gidx(); i < n_in; i += gstride()) {
    i64 n, c, h, w;
    pool_at(d, i, d.H, d.W, n, c, h, w);
    float s = 0.0f;
    i64 oh0, oh1, ow0, ow1;
    pool_span(h, d.kh, d.sh, d.ph, d.OH, oh0, oh1);
    pool_span(w, d.kw, d.sw, d.pw, d.OW, ow0, ow1);
    for (i64 oh = oh0; oh <= oh1; oh++) {
      i64 h0 = oh * d.sh - d.ph, a = h - h0;
      if (a < 0 || a >= d.kh) continue;
      for (i64 ow = ow0; ow <= ow1; ow++) {
        i64 w0 = ow * d.sw - d.pw, b = w - w0;
        if (b < 0 || b >= d.kw) continue;
        i64 hs = h0 < 0 ? 0 : h0, he = h0 + d.kh > d.H ? d.H : h0 + d.kh;
        i64 wsx = w0 < 0 ? 0 : w0, we = w0 + d.kw > d.W ? d.W : w0 + d.kw;
        s += ld(dy, pool_off(d, d.OH, d.OW, n, c, oh, ow)) / (float)((he - hs) * (we - wsx));
      }
    }
    st(dx, i, s);
  }
}
KERNEL ts_k_avgpool_bwd_f32(const float *dy, float *dx, pdesc d) { avgpool_bwd(dy, dx, d); }
KERNEL ts_k_avgpool_bwd_bf16(const bf16 *dy, bf16 *dx, pdesc d) { avgpool_bwd(dy, dx, d); }

// softmax (log_softmax when lg) over the middle axis of (outer, len, inner): one thread per row
template <typename T> DEV void softmax_fwd(const T *x, T *y, i64 outer, i64 len, i64 inner, int lg) {
  i64 rows = outer * inner;
  for (i64 r = gidx(); r < rows; r += gstride()) {
    i64 o = r / inner, in = r % inner, base = o * len * inner + in;
    float m = -3.402823466e38f, s = 0.0f;
    for (i64 j = 0; j < len; j++) m = fmax_(m, ld(x, base + j * inner));
    for (i64 j = 0; j < len; j++) s += fexp(ld(x, base + j * inner) - m);
    float ls = flog(s);
    for (i64 j = 0; j < len; j++) {
      float z = ld(x, base + j * inner) - m;
      st(y, base + j * inner, lg ? z - ls : fexp(z) / s);
    }
  }
}
KERNEL ts_k_softmax_fwd_f32(const float *x, float *y, i64 outer, i64 len, i64 inner, int lg) {
  softmax_fwd(x, y, outer, len, inner, lg);
}
KERNEL ts_k_softmax_fwd_bf16(const bf16 *x, bf16 *y, i64 outer, i64 len, i64 inner, int lg) {
  softmax_fwd(x, y, outer, len, inner, lg);
}
// the same over the last axis (inner 1: rows of len contiguous), a warp per row: each lane over
// elements lane, lane + 32, ..., the lanes' maxima and sums in a fixed tree
template <typename T> DEV void softmax_fwd_rows(const T *x, T *y, i64 rows, i64 len, int lg) {
  const i64 nw = (i64)nbid() * (ntid() >> 5);
  const int lane = tid() & 31;
  for (i64 r = (i64)bid() * (ntid() >> 5) + (tid() >> 5); r < rows; r += nw) {
    const i64 base = r * len;
    float m = -3.402823466e38f, s = 0.0f;
    for (i64 j = lane; j < len; j += 32) m = fmax_(m, ld(x, base + j));
    m = warp_max(m);
    for (i64 j = lane; j < len; j += 32) s += fexp(ld(x, base + j) - m);
    s = warp_sum(s);
    float ls = flog(s);
    for (i64 j = lane; j < len; j += 32) {
      float z = ld(x, base + j) - m;
      st(y, base + j, lg ? z - ls : fexp(z) / s);
    }
  }
}
KERNEL ts_k_softmax_fwd_rows_f32(const float *x, float *y, i64 rows, i64 len, int lg) { softmax_fwd_rows(x, y, rows, len, lg); }
KERNEL ts_k_softmax_fwd_rows_bf16(const bf16 *x, bf16 *y, i64 rows, i64 len, int lg) { softmax_fwd_rows(x, y, rows, len, lg); }
template <typename T> DEV void softmax_bwd_rows(const T *dy, const T *y, T *dx, i64 rows, i64 len, int lg) {
  const i64 nw = (i64)nbid() * (ntid() >> 5);
  const int lane = tid() & 31;
  for (i64 r = (i64)bid() * (ntid() >> 5) + (tid() >> 5); r < rows; r += nw) {
    const i64 base = r * len;
    float s = 0.0f;
    for (i64 j = lane; j < len; j += 32) s += lg ? ld(dy, base + j) : ld(dy, base + j) * ld(y, base + j);
    s = warp_sum(s);
    for (i64 j = lane; j < len; j += 32) {
      i64 k = base + j;
      st(dx, k, lg ? ld(dy, k) - fexp(ld(y, k)) * s : ld(y, k) * (ld(dy, k) - s));
    }
  }
}
KERNEL ts_k_softmax_bwd_rows_f32(const float *dy, const float *y, float *dx, i64 rows, i64 len, int lg) {
  softmax_bwd_rows(dy, y, dx, rows, len, lg);
}
KERNEL ts_k_softmax_bwd_rows_bf16(const bf16 *dy, const bf16 *y, bf16 *dx, i64 rows, i64 len, int lg) {
  softmax_bwd_rows(dy, y, dx, rows, len, lg);
}
// softmax: dx = y (dy - sum dy y); log_softmax: dx = dy - exp(y) sum dy
template <typename T> DEV void softmax_bwd(const T *dy, const T *y, T *dx, i64 outer, i64 len, i64 inner, int lg) {
  i64 rows = outer * inner;
  for (i64 r = gidx(); r < rows; r += gstride()) {
    i64 o = r / inner, in = r % inner, base = o * len * inner + in;
    float s = 0.0f;
    for (i64 j = 0; j < len; j++) s += lg ? ld(dy, base + j * inner) : ld(dy, base + j * inner) * ld(y, base + j * inner);
    for (i64 j = 0; j < len; j++) {
      i64 k = base + j * inner;
      st(dx, k, lg ? ld(dy, k) - fexp(ld(y, k)) * s : ld(y, k) * (ld(dy, k) - s));
    }
  }
}
KERNEL ts_k_softmax_bwd_f32(const float *dy, const float *y, float *dx, i64 outer, i64 len, i64 inner, int lg) {
  softmax_bwd(dy, y, dx, outer, len, inner, lg);
}
KERNEL ts_k_softmax_bwd_bf16(const bf16 *dy, const bf16 *y, bf16 *dx, i64 outer, i64 len, i64 inner, int lg) {
  softmax_bwd(dy, y, dx, outer, len, inner, lg);
}
