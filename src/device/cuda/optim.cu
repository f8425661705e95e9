// Fused optimizer updates over a flat parameter buffer, one pass each, as src/optim/optim.c
// computes them (PyTorch's formulas; the step's scalars computed on the host in double as there).
#include "ts_cuda.h"

// SGD: p -= lr * (g + wd p)
KERNEL ts_k_sgd_f32(float *p, const float *g, i64 n, float lr, float wd) {
  for (i64 i = gidx(); i < n; i += gstride()) {
    float d = g[i] + wd * p[i];
    p[i] = p[i] + (-lr) * d;
  }
}
// Momentum (dampening, Nesterov): buf = first ? d : mu buf + (1-damp) d
KERNEL ts_k_momentum_f32(float *p, const float *g, float *b, i64 n, float lr, float wd, float mu, float one_m_damp,
                         int first, int nesterov) {
  for (i64 i = gidx(); i < n; i += gstride()) {
    float d = g[i] + wd * p[i];
    float bi = first ? d : b[i] * mu + one_m_damp * d;
    b[i] = bi;
    float u = nesterov ? d + mu * bi : bi;
    p[i] = p[i] + (-lr) * u;
  }
}
// Adam / AdamW (AdamW: decay_mul = 1 - lr wd and l2 = 0; Adam: decay_mul 1, l2 = wd)
KERNEL ts_k_adam_f32(float *p, const float *g, float *m, float *v, i64 n, float l2, float decay_mul, float b1,
                     float one_m_b1, float b2, float one_m_b2, float bc2_sqrt, float eps, float neg_step_size) {
  for (i64 i = gidx(); i < n; i += gstride()) {
    float pi = p[i] * decay_mul;
    float d = g[i] + l2 * pi;
    float mi = m[i] * b1 + one_m_b1 * d;
    float vi = v[i] * b2 + one_m_b2 * (d * d);
    m[i] = mi;
    v[i] = vi;
    float denom = fsqrt(vi) / bc2_sqrt + eps;
    p[i] = pi + neg_step_size * mi / denom;
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
