// Fused optimizer updates over a flat parameter buffer, one pass each, as src/optim/optim.c
// computes them (PyTorch's formulas; the step's scalars computed on the host in double as there).
#include "ts_cuda.h"

// one element of each update (the single-segment kernels and the multi-segment one share them)
// SGD: p -= lr * (g + wd p)
DEV void sgd1(float *p, const float *g, i64 i, float lr, float wd) {
  float d = g[i] + wd * p[i];
  p[i] = p[i] + (-lr) * d;
}
// Momentum (dampening, Nesterov): buf = first ? d : mu buf + (1-damp) d
DEV void mom1(float *p, const float *g, float *b, i64 i, float lr, float wd, float mu, float one_m_damp, int first,
              int nesterov) {
  float d = g[i] + wd * p[i];
  float bi = first ? d : b[i] * mu + one_m_damp * d;
  b[i] = bi;
  float u = nesterov ? d + mu * bi : bi;
  p[i] = p[i] + (-lr) * u;
}
// Adam / AdamW (AdamW: decay_mul = 1 - lr wd and l2 = 0; Adam: decay_mul 1, l2 = wd)
DEV void adam1(float *p, const float *g, float *m, float *v, i64 i, float l2, float decay_mul, float b1, float one_m_b1,
               float b2, float one_m_b2, float bc2_sqrt, float eps, float neg_step_size) {
  float pi = p[i] * decay_mul;
  float d = g[i] + l2 * pi;
  float mi = m[i] * b1 + one_m_b1 * d;
  float vi = v[i] * b2 + one_m_b2 * (d * d);
  m[i] = mi;
  v[i] = vi;
  float denom = fsqrt(vi) / bc2_sqrt + eps;
  p[i] = pi + neg_step_size * mi / denom;
}
KERNEL ts_k_sgd_f32(float *p, const float *g, i64 n, float lr, float wd) {
  for (i64 i = gidx(); i < n; i += gstride()) sgd1(p, g, i, lr, wd);
}
KERNEL ts_k_momentum_f32(float *p, const float *g, float *b, i64 n, float lr, float wd, float mu, float one_m_damp,
                         int first, int nesterov) {
  for (i64 i = gidx(); i < n; i += gstride()) mom1(p, g, b, i, lr, wd, mu, one_m_damp, first, nesterov);
}
KERNEL ts_k_adam_f32(float *p, const float *g, float *m, float *v, i64 n, float l2, float decay_mul, float b1,
                     float one_m_b1, float b2, float one_m_b2, float bc2_sqrt, float eps, float neg_step_size) {
  for (i64 i = gidx(); i < n; i += gstride())
    adam1(p, g, m, v, i, l2, decay_mul, b1, one_m_b1, b2, one_m_b2, bc2_sqrt, eps, neg_step_size);
}

// Every segment of the flat buffers in one launch (PyTorch's foreach/fused optimizers' point: not a
// launch per parameter): ch lists chunks [lo, hi) of at most a few thousand elements (no chunk
// across two segments; frozen segments absent), each with its segment's weight decay on or off; a
// block per chunk. The arithmetic is the single-segment kernels' (bitwise). kind: 0 SGD, 1 momentum,
// 2 Adam/AdamW; a (struct ts__gpu_optim_args): the step's scalars for a decayed segment (wd, l2,
// decay_mul; an undecayed one gets 0, 0, 1).
struct mchunk {
  i64 lo, hi, decay;
};
struct oargs {
  float lr, wd, mu, one_m_damp, l2, decay_mul, b1, omb1, b2, omb2, bc2_sqrt, eps, neg_step;
  int first, nesterov;
};
KERNEL ts_k_optim_multi_f32(int kind, float *p, const float *g, float *m, float *v, const mchunk *ch, i64 nch, oargs a) {
  for (i64 c = bid(); c < nch; c += nbid()) {
    const mchunk k = ch[c];
    const float wd = k.decay ? a.wd : 0.0f, l2 = k.decay ? a.l2 : 0.0f, mul = k.decay ? a.decay_mul : 1.0f;
    for (i64 i = k.lo + tid(); i < k.hi; i += ntid()) {
      if (kind == 0) sgd1(p, g, i, a.lr, wd);
      else if (kind == 1) mom1(p, g, m, i, a.lr, wd, a.mu, a.one_m_damp, a.first, a.nesterov);
      else adam1(p, g, m, v, i, l2, mul, a.b1, a.omb1, a.b2, a.omb2, a.bc2_sqrt, a.eps, a.neg_step);
    }
  }
}
// g (n) *= s[0]: global-norm clipping's factor, read on the device (no host round trip)
KERNEL ts_k_scale_by_f32(float *g, i64 n, const float *s) {
  float f = s[0];
  for (i64 i = gidx(); i < n; i += gstride()) g[i] *= f;
}
// clip factor: part (np) the partial sums of squares -> s[0] = min(1, max_norm / (norm + 1e-6)),
// s[1] = the norm; one block, the partials summed in a fixed order
KERNEL ts_k_clip_factor_f32(const float *part, int np, float max_norm, float *s) {
  __shared__ float sh[32];
  float v = 0.0f;
  for (int i = tid(); i < np; i += ntid()) v += part[i];
  v = block_sum(v, sh);
  if (tid() == 0) {
    float norm = fsqrt(v), f = max_norm / (norm + 1e-6f);
    s[0] = f < 1.0f ? f : 1.0f;
    s[1] = norm;
  }
}
// LAMB (optim.c's step_lamb), pass 1: m, v updated, the update direction u into u
KERNEL ts_k_lamb1_f32(const float *p, const float *g, float *m, float *v, i64 n, float b1, float omb1, float b2,
                      float omb2, float inv_bc1, float inv_bc2, float eps, float wd, float *u) {
  for (i64 i = gidx(); i < n; i += gstride()) {
    float mi = m[i] * b1 + omb1 * g[i];
    float vi = v[i] * b2 + omb2 * (g[i] * g[i]);
    m[i] = mi;
    v[i] = vi;
    u[i] = (mi * inv_bc1) / (fsqrt(vi * inv_bc2) + eps) + wd * p[i];
  }
}
// pass 2: the trust ratio ||p|| / ||u|| from the sums of squares sq[0], sq[1] (1 unless adapt and
// both non-zero), then p -= lr ratio u
KERNEL ts_k_lamb2_f32(float *p, const float *u, i64 n, float lr, const float *sq, int adapt) {
  float pn = fsqrt(sq[0]), un = fsqrt(sq[1]);
  float ratio = adapt && pn != 0.0f && un != 0.0f ? pn / un : 1.0f, neg = -(lr * ratio);
  for (i64 i = gidx(); i < n; i += gstride()) p[i] = p[i] + neg * u[i];
}
