// Convolution, pooling and batch normalisation on NCHW (src/kernels/conv.h, pool.h, norm.h), the
// correctness kernels: one thread per output element summing its terms in a fixed order (direct
// convolution; cuDNN or implicit-GEMM kernels are the speed work to come, docs/gpu.md). f32.
#include "ts_cuda.h"

struct cdesc {
  i64 N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, groups;
};

// x (N,C,H,W), w (O,C/g,KH,KW), b (O) or null -> y (N,O,OH,OW)
KERNEL ts_k_conv2d_fwd_f32(const float *x, const float *w, const float *b, float *y, cdesc d) {
  i64 n_out = d.N * d.O * d.OH * d.OW, cg = d.C / d.groups, og = d.O / d.groups;
  for (i64 i = gidx(); i < n_out; i += gstride()) {
    i64 ow = i % d.OW, oh = (i / d.OW) % d.OH, o = (i / (d.OW * d.OH)) % d.O, n = i / (d.OW * d.OH * d.O);
    i64 g = o / og;
    float s = b ? b[o] : 0.0f;
    for (i64 c = 0; c < cg; c++)
      for (i64 kh = 0; kh < d.KH; kh++) {
        i64 h = oh * d.sh - d.ph + kh * d.dh;
        if (h < 0 || h >= d.H) continue;
        for (i64 kw = 0; kw < d.KW; kw++) {
          i64 ww = ow * d.sw - d.pw + kw * d.dw;
          if (ww < 0 || ww >= d.W) continue;
          s += x[((n * d.C + g * cg + c) * d.H + h) * d.W + ww] * w[((o * cg + c) * d.KH + kh) * d.KW + kw];
        }
      }
    y[i] = s;
  }
}

// dy (N,O,OH,OW), w -> dx (N,C,H,W)
KERNEL ts_k_conv2d_bwd_data_f32(const float *dy, const float *w, float *dx, cdesc d) {
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
          s += dy[((n * d.O + o) * d.OH + oh) * d.OW + ow] * w[((o * cg + cl) * d.KH + kh) * d.KW + kw];
        }
      }
    }
    dx[i] = s;
  }
}

// x, dy -> dw (O,C/g,KH,KW); db (O) when not null (threads past the weights do the bias)
KERNEL ts_k_conv2d_bwd_weight_f32(const float *x, const float *dy, float *dw, float *db, cdesc d) {
  i64 cg = d.C / d.groups, og = d.O / d.groups, nw = d.O * cg * d.KH * d.KW, nt = nw + (db ? d.O : 0);
  for (i64 i = gidx(); i < nt; i += gstride()) {
    if (i >= nw) { // the bias: sum of dy over n, oh, ow
      i64 o = i - nw;
      float s = 0.0f;
      for (i64 n = 0; n < d.N; n++)
        for (i64 p = 0; p < d.OH * d.OW; p++) s += dy[(n * d.O + o) * d.OH * d.OW + p];
      db[o] = s;
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
          s += x[((n * d.C + c) * d.H + h) * d.W + ww] * dy[((n * d.O + o) * d.OH + oh) * d.OW + ow];
        }
      }
    dw[i] = s;
  }
}

struct pdesc {
  i64 N, C, H, W, OH, OW, kh, kw, sh, sw, ph, pw;
};

// max pooling: y and the window index of the first maximum (i * kw + j) in ws; padding never wins
KERNEL ts_k_maxpool_fwd_f32(const float *x, float *y, unsigned char *ws, pdesc d) {
  i64 n_out = d.N * d.C * d.OH * d.OW;
  for (i64 i = gidx(); i < n_out; i += gstride()) {
    i64 ow = i % d.OW, oh = (i / d.OW) % d.OH, nc = i / (d.OW * d.OH);
    float m = -3.402823466e38f;
    int best = -1;
    for (i64 a = 0; a < d.kh; a++) {
      i64 h = oh * d.sh - d.ph + a;
      if (h < 0 || h >= d.H) continue;
      for (i64 b = 0; b < d.kw; b++) {
        i64 w = ow * d.sw - d.pw + b;
        if (w < 0 || w >= d.W) continue;
        float v = x[(nc * d.H + h) * d.W + w];
        if (best < 0 || v > m) m = v, best = (int)(a * d.kw + b);
      }
    }
    y[i] = m;
    ws[i] = (unsigned char)(best < 0 ? 0 : best);
  }
}
// dx (one thread per input element): the dy of every window whose maximum it was, windows in order
KERNEL ts_k_maxpool_bwd_f32(const float *dy, const unsigned char *ws, float *dx, pdesc d) {
  i64 n_in = d.N * d.C * d.H * d.W;
  for (i64 i = gidx(); i < n_in; i += gstride()) {
    i64 w = i % d.W, h = (i / d.W) % d.H, nc = i / (d.W * d.H);
    float s = 0.0f;
    for (i64 oh = 0; oh < d.OH; oh++) {
      i64 a = h - (oh * d.sh - d.ph);
      if (a < 0 || a >= d.kh) continue;
      for (i64 ow = 0; ow < d.OW; ow++) {
        i64 b = w - (ow * d.sw - d.pw);
        if (b < 0 || b >= d.kw) continue;
        i64 o = (nc * d.OH + oh) * d.OW + ow;
        if (ws[o] == a * d.kw + b) s += dy[o];
      }
    }
    dx[i] = s;
  }
}
// average pooling without the padding in the divisor
KERNEL ts_k_avgpool_fwd_f32(const float *x, float *y, pdesc d) {
  i64 n_out = d.N * d.C * d.OH * d.OW;
  for (i64 i = gidx(); i < n_out; i += gstride()) {
    i64 ow = i % d.OW, oh = (i / d.OW) % d.OH, nc = i / (d.OW * d.OH);
    float s = 0.0f;
    int cnt = 0;
    for (i64 a = 0; a < d.kh; a++) {
      i64 h = oh * d.sh - d.ph + a;
      if (h < 0 || h >= d.H) continue;
      for (i64 b = 0; b < d.kw; b++) {
        i64 w = ow * d.sw - d.pw + b;
        if (w < 0 || w >= d.W) continue;
        s += x[(nc * d.H + h) * d.W + w];
        cnt++;
      }
    }
    y[i] = cnt ? s / (float)cnt : 0.0f;
  }
}
KERNEL ts_k_avgpool_bwd_f32(const float *dy, float *dx, pdesc d) {
  i64 n_in = d.N * d.C * d.H * d.W;
  for (i64 i = gidx(); i < n_in; i += gstride()) {
    i64 w = i % d.W, h = (i / d.W) % d.H, nc = i / (d.W * d.H);
    float s = 0.0f;
    for (i64 oh = 0; oh < d.OH; oh++) {
      i64 h0 = oh * d.sh - d.ph, a = h - h0;
      if (a < 0 || a >= d.kh) continue;
      for (i64 ow = 0; ow < d.OW; ow++) {
        i64 w0 = ow * d.sw - d.pw, b = w - w0;
        if (b < 0 || b >= d.kw) continue;
        i64 hs = h0 < 0 ? 0 : h0, he = h0 + d.kh > d.H ? d.H : h0 + d.kh;
        i64 wsx = w0 < 0 ? 0 : w0, we = w0 + d.kw > d.W ? d.W : w0 + d.kw;
        s += dy[(nc * d.OH + oh) * d.OW + ow] / (float)((he - hs) * (we - wsx));
      }
    }
    dx[i] = s;
  }
}

// batch norm over (N, C, S), one block per channel: training: the batch's mean and biased
// variance into mean/var, the running statistics updated with the unbiased one; else the running
// statistics normalise (and are copied to mean/var)
KERNEL ts_k_batchnorm_fwd_f32(const float *x, const float *gamma, const float *beta, float *rmean, float *rvar,
                              float *y, float *mean, float *var, i64 N, i64 C, i64 S, float momentum, float eps,
                              int training) {
  __shared__ float sh[32];
  i64 M = N * S;
  for (i64 c = bid(); c < C; c += nbid()) {
    float m, v;
    if (training) {
      float s = 0.0f;
      for (i64 i = tid(); i < M; i += ntid()) s += x[((i / S) * C + c) * S + i % S];
      m = block_sum(s, sh) / (float)M;
      float q = 0.0f;
      for (i64 i = tid(); i < M; i += ntid()) {
        float dv = x[((i / S) * C + c) * S + i % S] - m;
        q += dv * dv;
      }
      v = block_sum(q, sh) / (float)M;
      if (tid() == 0) {
        rmean[c] = (1.0f - momentum) * rmean[c] + momentum * m;
        rvar[c] = (1.0f - momentum) * rvar[c] + momentum * v * (float)M / (float)(M - 1);
      }
    } else {
      m = rmean[c], v = rvar[c];
    }
    if (tid() == 0) mean[c] = m, var[c] = v;
    float rs = 1.0f / fsqrt(v + eps), ga = gamma ? gamma[c] : 1.0f, be = beta ? beta[c] : 0.0f;
    for (i64 i = tid(); i < M; i += ntid()) {
      i64 k = ((i / S) * C + c) * S + i % S;
      y[k] = (x[k] - m) * rs * ga + be;
    }
  }
}
// backward: dgamma = sum dy xhat, dbeta = sum dy; dx through the batch statistics (training) or not
KERNEL ts_k_batchnorm_bwd_f32(const float *dy, const float *x, const float *gamma, const float *mean,
                              const float *var, float *dx, float *dgamma, float *dbeta, i64 N, i64 C, i64 S, float eps,
                              int training) {
  __shared__ float sh[32];
  i64 M = N * S;
  for (i64 c = bid(); c < C; c += nbid()) {
    float m = mean[c], rs = 1.0f / fsqrt(var[c] + eps), ga = gamma ? gamma[c] : 1.0f;
    float sd = 0.0f, sdx = 0.0f;
    for (i64 i = tid(); i < M; i += ntid()) {
      i64 k = ((i / S) * C + c) * S + i % S;
      sd += dy[k];
      sdx += dy[k] * (x[k] - m) * rs;
    }
    sd = block_sum(sd, sh);
    sdx = block_sum(sdx, sh);
    if (tid() == 0) {
      if (dgamma) dgamma[c] = sdx;
      if (dbeta) dbeta[c] = sd;
    }
    for (i64 i = tid(); i < M; i += ntid()) {
      i64 k = ((i / S) * C + c) * S + i % S;
      float xh = (x[k] - m) * rs;
      dx[k] = training ? ga * rs * (dy[k] - sd / (float)M - xh * sdx / (float)M) : ga * rs * dy[k];
    }
  }
}

// softmax (log_softmax when lg) over the middle axis of (outer, len, inner): one thread per row
KERNEL ts_k_softmax_fwd_f32(const float *x, float *y, i64 outer, i64 len, i64 inner, int lg) {
  i64 rows = outer * inner;
  for (i64 r = gidx(); r < rows; r += gstride()) {
    i64 o = r / inner, in = r % inner, base = o * len * inner + in;
    float m = -3.402823466e38f, s = 0.0f;
    for (i64 j = 0; j < len; j++) m = fmax_(m, x[base + j * inner]);
    for (i64 j = 0; j < len; j++) s += fexp(x[base + j * inner] - m);
    float ls = flog(s);
    for (i64 j = 0; j < len; j++) {
      float z = x[base + j * inner] - m;
      y[base + j * inner] = lg ? z - ls : fexp(z) / s;
    }
  }
}
// softmax: dx = y (dy - sum dy y); log_softmax: dx = dy - exp(y) sum dy
KERNEL ts_k_softmax_bwd_f32(const float *dy, const float *y, float *dx, i64 outer, i64 len, i64 inner, int lg) {
  i64 rows = outer * inner;
  for (i64 r = gidx(); r < rows; r += gstride()) {
    i64 o = r / inner, in = r % inner, base = o * len * inner + in;
    float s = 0.0f;
    for (i64 j = 0; j < len; j++) s += lg ? dy[base + j * inner] : dy[base + j * inner] * y[base + j * inner];
    for (i64 j = 0; j < len; j++) {
      i64 k = base + j * inner;
      dx[k] = lg ? dy[k] - fexp(y[k]) * s : y[k] * (dy[k] - s);
    }
  }
}
