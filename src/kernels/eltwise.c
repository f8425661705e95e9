/* Element-wise activations: plain-C reference kernels and oneDNN eltwise primitives. */
#include "eltwise.h"

#include <math.h>

#include "dnnl_ctx.h"
#include "lowp.h"

#define PAR_MIN 32768 /* below this many elements, stay on one thread */

int ts__eltwise_bwd_uses_dst(int alg) {
  switch (alg) {
    case TS_ELT_RELU: case TS_ELT_SIGMOID: case TS_ELT_TANH: case TS_ELT_EXP: case TS_ELT_SQRT:
      return 1;
    default:
      return 0;
  }
}

static int bad_alg(const char *what, int alg) {
  return ts_error_set(TS_EINVAL, "%s: unknown eltwise algorithm %d", what, alg);
}

#define SQRT_2_OVER_PI 0.79788456080286535588f
#define GELU_C 0.044715f
#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f

static inline float sigmoidf(float x) {
  if (x >= 0) return 1.0f / (1.0f + expf(-x));
  float e = expf(x);
  return e / (1.0f + e);
}

/* Loop body over i in [0,n) with one expression, parallel and vectorisable where libm allows. */
#define ELT_LOOP(expr)                                                    \
  do {                                                                    \
    _Pragma("omp parallel for simd schedule(static) if (n > PAR_MIN)")    \
    for (int64_t i = 0; i < n; i++) {                                     \
      float v = x[i];                                                     \
      y[i] = (expr);                                                      \
    }                                                                     \
  } while (0)

// x (n) -> y (n)
int ts__eltwise_fwd_ref(int alg, float alpha, float beta, const float *x, float *y, int64_t n) {
  (void)beta;
  switch (alg) {
    /* a plain ReLU gives +0 below zero (not 0 * v = -0), as oneDNN and torch.relu do, and as the
     * executor's BN+ReLU fusion writes it */
    case TS_ELT_RELU: ELT_LOOP(v > 0 ? v : alpha == 0.0f ? 0.0f : alpha * v); break;
    case TS_ELT_GELU_TANH:
      ELT_LOOP(0.5f * v * (1.0f + tanhf(SQRT_2_OVER_PI * (v + GELU_C * v * v * v))));
      break;
    case TS_ELT_GELU_ERF: ELT_LOOP(0.5f * v * (1.0f + erff(v * INV_SQRT2))); break;
    case TS_ELT_SIGMOID: ELT_LOOP(sigmoidf(v)); break;
    case TS_ELT_TANH: ELT_LOOP(tanhf(v)); break;
    case TS_ELT_EXP: ELT_LOOP(expf(v)); break;
    case TS_ELT_LOG: ELT_LOOP(logf(v)); break;
    case TS_ELT_SQRT: ELT_LOOP(sqrtf(v)); break;
    case TS_ELT_SQUARE: ELT_LOOP(v * v); break;
    case TS_ELT_ABS: ELT_LOOP(fabsf(v)); break;
    case TS_ELT_NEG: ELT_LOOP(-v); break;
    default: return bad_alg("eltwise", alg);
  }
  return TS_OK;
}

#define BWD_LOOP(expr)                                                    \
  do {                                                                    \
    _Pragma("omp parallel for simd schedule(static) if (n > PAR_MIN)")    \
    for (int64_t i = 0; i < n; i++) {                                     \
      float g = dy[i], s = src[i];                                        \
      (void)s;                                                            \
      dx[i] = (expr);                                                     \
    }                                                                     \
  } while (0)

static inline float gelu_tanh_grad(float v) {
  float u = SQRT_2_OVER_PI * (v + GELU_C * v * v * v);
  float t = tanhf(u);
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * v * v);
}

static inline float gelu_erf_grad(float v) {
  return 0.5f * (1.0f + erff(v * INV_SQRT2)) + v * INV_SQRT_2PI * expf(-0.5f * v * v);
}

// dy (n), src = x or y (n) -> dx (n)
int ts__eltwise_bwd_ref(int alg, float alpha, float beta, int use_dst, const float *dy,
                        const float *src, float *dx, int64_t n) {
  (void)beta;
  if (use_dst && !ts__eltwise_bwd_uses_dst(alg))
    return ts_error_set(TS_EINVAL, "eltwise_bwd: algorithm %d has no backward from the output", alg);
  switch (alg) {
    case TS_ELT_RELU: BWD_LOOP(s > 0 ? g : alpha * g); break; /* y > 0 iff x > 0 (alpha >= 0) */
    case TS_ELT_GELU_TANH: BWD_LOOP(g * gelu_tanh_grad(s)); break;
    case TS_ELT_GELU_ERF: BWD_LOOP(g * gelu_erf_grad(s)); break;
    case TS_ELT_SIGMOID:
      if (use_dst) BWD_LOOP(g * s * (1.0f - s));
      else BWD_LOOP(g * sigmoidf(s) * (1.0f - sigmoidf(s)));
      break;
    case TS_ELT_TANH:
      if (use_dst) BWD_LOOP(g * (1.0f - s * s));
      else BWD_LOOP(g * (1.0f - tanhf(s) * tanhf(s)));
      break;
    case TS_ELT_EXP:
      if (use_dst) BWD_LOOP(g * s);
      else BWD_LOOP(g * expf(s));
      break;
    case TS_ELT_LOG: BWD_LOOP(g / s); break;
    case TS_ELT_SQRT:
      if (use_dst) BWD_LOOP(g / (2.0f * s));
      else BWD_LOOP(g / (2.0f * sqrtf(s)));
      break;
    case TS_ELT_SQUARE: BWD_LOOP(2.0f * s * g); break;
    case TS_ELT_ABS: BWD_LOOP(s > 0 ? g : (s < 0 ? -g : 0.0f)); break;
    case TS_ELT_NEG: BWD_LOOP(-g); break;
    default: return bad_alg("eltwise_bwd", alg);
  }
  return TS_OK;
}

/* ---------------- oneDNN ---------------- */

typedef struct {
  int kind; /* 0 forward, 1 backward */
  int alg, use_dst;
  float alpha, beta;
  int64_t n;
  int32_t dt, pad_; /* dnnl data type */
} elt_key;

/* Maps a ts_eltwise_alg to a oneDNN algorithm (and its alpha/beta). */
static int dnnl_alg_of(int alg, int use_dst, float *alpha, float *beta, dnnl_alg_kind_t *out) {
  switch (alg) {
    case TS_ELT_RELU: *out = use_dst ? dnnl_eltwise_relu_use_dst_for_bwd : dnnl_eltwise_relu; break;
    case TS_ELT_GELU_TANH: *out = dnnl_eltwise_gelu_tanh; break;
    case TS_ELT_GELU_ERF: *out = dnnl_eltwise_gelu_erf; break;
    case TS_ELT_SIGMOID:
      *out = use_dst ? dnnl_eltwise_logistic_use_dst_for_bwd : dnnl_eltwise_logistic;
      break;
    case TS_ELT_TANH: *out = use_dst ? dnnl_eltwise_tanh_use_dst_for_bwd : dnnl_eltwise_tanh; break;
    case TS_ELT_EXP: *out = use_dst ? dnnl_eltwise_exp_use_dst_for_bwd : dnnl_eltwise_exp; break;
    case TS_ELT_LOG: *out = dnnl_eltwise_log; break;
    case TS_ELT_SQRT: *out = use_dst ? dnnl_eltwise_sqrt_use_dst_for_bwd : dnnl_eltwise_sqrt; break;
    case TS_ELT_SQUARE: *out = dnnl_eltwise_square; break;
    case TS_ELT_ABS: *out = dnnl_eltwise_abs; break;
    case TS_ELT_NEG:
      *out = dnnl_eltwise_linear;
      *alpha = -1.0f;
      *beta = 0.0f;
      break;
    default: return bad_alg("eltwise (oneDNN)", alg);
  }
  if (alg != TS_ELT_RELU && alg != TS_ELT_NEG) *alpha = *beta = 0.0f;
  if (alg == TS_ELT_RELU) *beta = 0.0f;
  return TS_OK;
}

static ts__dnnl_prim *elt_prim(int kind, int alg, float alpha, float beta, int use_dst, int64_t n,
                               dnnl_data_type_t dt) {
  elt_key key;
  memset(&key, 0, sizeof key);
  key.kind = kind;
  key.alg = alg;
  key.use_dst = use_dst;
  key.alpha = alpha;
  key.beta = beta;
  key.n = n;
  key.dt = (int32_t)dt;
  ts__dnnl_prim *p = ts__dnnl_cache_get(&key, sizeof key);
  if (p) return p;
  dnnl_alg_kind_t da = dnnl_eltwise_relu;
  float a = alpha, b = beta;
  if (dnnl_alg_of(alg, use_dst, &a, &b, &da)) return NULL;
  dnnl_memory_desc_t md;
  int64_t dims[1] = {n};
  if (ts__dnnl_md_plain(&md, 1, dims, dt)) return NULL;
  dnnl_eltwise_desc_t fd;
  dnnl_primitive_desc_t fpd = NULL, pd = NULL;
  if (ts__dnnl_check(dnnl_eltwise_forward_desc_init(&fd, dnnl_forward_training, da, &md, a, b),
                     "eltwise forward descriptor") ||
      ts__dnnl_check(dnnl_primitive_desc_create(&fpd, &fd, NULL, ts__dnnl_engine(), NULL),
                     "eltwise forward primitive descriptor"))
    return NULL;
  if (kind == 0) return ts__dnnl_cache_put_pd(&key, sizeof key, fpd);
  dnnl_eltwise_desc_t bd;
  int rc = ts__dnnl_check(dnnl_eltwise_backward_desc_init(&bd, da, &md, &md, a, b),
                          "eltwise backward descriptor");
  if (!rc)
    rc = ts__dnnl_check(dnnl_primitive_desc_create(&pd, &bd, NULL, ts__dnnl_engine(), fpd),
                        "eltwise backward primitive descriptor");
  dnnl_primitive_desc_destroy(fpd);
  if (rc) return NULL;
  return ts__dnnl_cache_put_pd(&key, sizeof key, pd);
}

// x (n) -> y (n)
int ts__eltwise_fwd_dnnl(int alg, float alpha, float beta, const float *x, float *y, int64_t n) {
  if (n == 0) return TS_OK;
  ts__dnnl_prim *p = elt_prim(0, alg, alpha, beta, 0, n, dnnl_f32);
  if (!p) return ts_error_wrap(TS_EBACKEND, "eltwise forward");
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(p->pd, dnnl_query_src_md, 0);
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_SRC, ts__dnnl_mem(md, (void *)x)},
                             {DNNL_ARG_DST, ts__dnnl_mem(md, y)}};
  return ts__dnnl_run(p, 2, args, "eltwise forward");
}

// dy (n), src = x or y (n) -> dx (n)
int ts__eltwise_bwd_dnnl(int alg, float alpha, float beta, int use_dst, const float *dy,
                         const float *src, float *dx, int64_t n) {
  if (n == 0) return TS_OK;
  if (use_dst && !ts__eltwise_bwd_uses_dst(alg))
    return ts_error_set(TS_EINVAL, "eltwise_bwd: algorithm %d has no backward from the output", alg);
  ts__dnnl_prim *p = elt_prim(1, alg, alpha, beta, use_dst, n, dnnl_f32);
  if (!p) return ts_error_wrap(TS_EBACKEND, "eltwise backward");
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(p->pd, dnnl_query_diff_src_md, 0);
  dnnl_exec_arg_t args[3] = {{use_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, ts__dnnl_mem(md, (void *)src)},
                             {DNNL_ARG_DIFF_DST, ts__dnnl_mem(md, (void *)dy)},
                             {DNNL_ARG_DIFF_SRC, ts__dnnl_mem(md, dx)}};
  return ts__dnnl_run(p, 3, args, "eltwise backward");
}

/* ---------------- 16-bit (bf16, f16) ---------------- */

typedef struct {
  int alg, use_dst;
  float alpha, beta;
} elt_args;

static int fwd_chunk(float *const *b, int64_t off, int64_t len, const void *ctx) {
  const elt_args *a = ctx;
  (void)off;
  return ts__eltwise_fwd_ref(a->alg, a->alpha, a->beta, b[0], b[1], len);
}

static int bwd_chunk(float *const *b, int64_t off, int64_t len, const void *ctx) {
  const elt_args *a = ctx;
  (void)off;
  return ts__eltwise_bwd_ref(a->alg, a->alpha, a->beta, a->use_dst, b[0], b[1], b[2], len);
}

/* The algorithms oneDNN runs as accurately as the f32 choice (run_eltwise.c keeps neg and log on
 * the reference loops). */
static int dnnl_alg(int dnnl, int alg) { return dnnl && alg != TS_ELT_NEG && alg != TS_ELT_LOG; }
/* bf16 through oneDNN's bf16 primitives where the CPU has them. */
static int dnnl_native(ts_dtype dt, int dnnl, int alg) {
  return dnnl_alg(dnnl, alg) && dt == TS_BF16 && ts__dnnl_bf16();
}
/* Otherwise (f16, or bf16 on a CPU without it) the f32 primitive on widened copies, block by
 * block: its vectorised tanh/erf/exp where the reference loops call libm per element, and even a
 * ReLU beats the streamed loops (bf16 over 1.6 M elements on an AVX2 CPU, 2 threads: GeLU 4.1 ms
 * against 17-18 ms streamed, f32 oneDNN 3.5-4.4 ms; ReLU 0.6-1.0 ms against 2.6-3.3 ms). The copies live
 * in this file's scratch slots, one block each (kernels run from one thread at a time): fresh
 * allocations of a whole tensor's size cost more in page faults than the copies (GeLU 10-14 ms). */
#define ELT_BLOCK ((int64_t)1 << 20)
static void *g_scr[3];
static size_t g_scap[3];
static int elt_converted(int bwd, const elt_args *a, ts_dtype dt, const void *x, const void *src, void *y,
                         int64_t n) {
  const int64_t blk = n < ELT_BLOCK ? n : ELT_BLOCK;
  const size_t bytes = sizeof(float) * (size_t)blk;
  float *fx = ts__scratch_grow(&g_scr[0], &g_scap[0], bytes);
  float *fs = bwd ? ts__scratch_grow(&g_scr[1], &g_scap[1], bytes) : NULL;
  float *fy = ts__scratch_grow(&g_scr[2], &g_scap[2], bytes);
  if (!fx || (bwd && !fs) || !fy)
    return ts_error_set(TS_ENOMEM, "%s (16-bit, oneDNN f32): out of memory for f32 copies of %lld elements",
                        bwd ? "eltwise_bwd" : "eltwise", (long long)blk);
  const size_t es = ts_dtype_size(dt);
  int rc = TS_OK;
  for (int64_t off = 0; off < n && rc == TS_OK; off += blk) {
    const int64_t len = n - off < blk ? n - off : blk;
    ts__lp_to_f32((const char *)x + es * (size_t)off, dt, fx, len);
    if (bwd) ts__lp_to_f32((const char *)src + es * (size_t)off, dt, fs, len);
    rc = bwd ? ts__eltwise_bwd_dnnl(a->alg, a->alpha, a->beta, a->use_dst, fx, fs, fy, len)
             : ts__eltwise_fwd_dnnl(a->alg, a->alpha, a->beta, fx, fy, len);
    if (rc == TS_OK) ts__lp_from_f32(fy, (char *)y + es * (size_t)off, dt, len);
  }
  return rc;
}

// x (n) dt -> y (n) dt
int ts__eltwise_fwd_lp(int alg, float alpha, float beta, ts_dtype dt, int dnnl, const void *x,
                       void *y, int64_t n) {
  int rc = ts__eltwise_fwd_ref(alg, alpha, beta, NULL, NULL, 0); /* validates alg */
  if (rc || n == 0) return rc;
  if (dnnl_native(dt, dnnl, alg)) {
    ts__dnnl_prim *p = elt_prim(0, alg, alpha, beta, 0, n, dnnl_bf16);
    if (!p) return ts_error_wrap(TS_EBACKEND, "eltwise forward (bf16)");
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(p->pd, dnnl_query_src_md, 0);
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_SRC, ts__dnnl_mem(md, (void *)x)},
                               {DNNL_ARG_DST, ts__dnnl_mem(md, y)}};
    return ts__dnnl_run(p, 2, args, "eltwise forward (bf16)");
  }
  const elt_args a = {alg, 0, alpha, beta};
  if (dnnl_alg(dnnl, alg) && n >= TS__LP_CHUNK) return elt_converted(0, &a, dt, x, NULL, y, n);
  const void *in[1] = {x};
  void *out[1] = {y};
  const ts_dtype d1[1] = {dt};
  return ts__lp_stream(1, in, d1, 1, out, d1, n, fwd_chunk, &a, "eltwise (16-bit)");
}

// dy (n) dt, src = x or y (n) dt -> dx (n) dt
int ts__eltwise_bwd_lp(int alg, float alpha, float beta, int use_dst, ts_dtype dt, int dnnl,
                       const void *dy, const void *src, void *dx, int64_t n) {
  int rc = ts__eltwise_bwd_ref(alg, alpha, beta, use_dst, NULL, NULL, NULL, 0);
  if (rc || n == 0) return rc;
  if (dnnl_native(dt, dnnl, alg)) {
    ts__dnnl_prim *p = elt_prim(1, alg, alpha, beta, use_dst, n, dnnl_bf16);
    if (!p) return ts_error_wrap(TS_EBACKEND, "eltwise backward (bf16)");
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(p->pd, dnnl_query_diff_src_md, 0);
    dnnl_exec_arg_t args[3] = {{use_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, ts__dnnl_mem(md, (void *)src)},
                               {DNNL_ARG_DIFF_DST, ts__dnnl_mem(md, (void *)dy)},
                               {DNNL_ARG_DIFF_SRC, ts__dnnl_mem(md, dx)}};
    return ts__dnnl_run(p, 3, args, "eltwise backward (bf16)");
  }
  const elt_args a = {alg, use_dst, alpha, beta};
  if (dnnl_alg(dnnl, alg) && n >= TS__LP_CHUNK) return elt_converted(1, &a, dt, dy, src, dx, n);
  const void *in[2] = {dy, src};
  void *out[1] = {dx};
  const ts_dtype d2[2] = {dt, dt};
  return ts__lp_stream(2, in, d2, 1, out, d2, n, bwd_chunk, &a, "eltwise_bwd (16-bit)");
}
