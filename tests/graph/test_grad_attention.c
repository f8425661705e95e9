/* Causal attention through the graph, autodiff and executor, on both backends (REF: naive
 * kernels, FAST: fused blocked kernels), against central finite differences of a double-precision
 * attention written here: (B,H,T,D) and (B,T,H,D) layouts, T not a multiple of the 64-row block,
 * T = 1, default and explicit scale, a GPT-style chain x -> split q,k,v -> reshape ->
 * attention_bthd -> reshape, and the packed op attention_qkv on x directly. Bad shapes, dtypes and scales give a status naming the op.
 * Tolerance: 1e-4 abs + rel. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
#include "grad_harness.h"

typedef struct {
  int64_t B, H, T, D;
  double scale;
  int layout; /* 0: (B,H,T,D), 1: (B,T,H,D) */
  int fused;  /* 1: a single input x (B,T,3*H*D) split into q,k,v; output (B,T,H*D) */
} attn_ctx;

/* element (b,h,t,d) of a tensor in the context's layout */
static inline int64_t at(const attn_ctx *c, int64_t b, int64_t h, int64_t t, int64_t d) {
  return c->layout ? ((b * c->T + t) * c->H + h) * c->D + d : ((b * c->H + h) * c->T + t) * c->D + d;
}

static void attn_d(const attn_ctx *c, const double *q, const double *k, const double *v,
                   int64_t ldx, double *o) {
  /* q,k,v addressed by at() scaled for a row stride ldx per (b,t) when fused */
  double *s = malloc(sizeof(double) * (size_t)c->T); /* a row's scores, then exp(score - max) */
  for (int64_t b = 0; b < c->B; b++)
    for (int64_t h = 0; h < c->H; h++)
      for (int64_t i = 0; i < c->T; i++) {
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; j++) {
          double dot = 0;
          for (int64_t d = 0; d < c->D; d++) {
            int64_t qi = ldx ? (b * c->T + i) * ldx + h * c->D + d : at(c, b, h, i, d);
            int64_t kj = ldx ? (b * c->T + j) * ldx + h * c->D + d : at(c, b, h, j, d);
            dot += q[qi] * k[kj];
          }
          s[j] = dot * c->scale;
          if (s[j] > mx) mx = s[j];
        }
        for (int64_t j = 0; j <= i; j++) sum += (s[j] = exp(s[j] - mx));
        for (int64_t d = 0; d < c->D; d++) {
          double acc = 0;
          for (int64_t j = 0; j <= i; j++) {
            int64_t vj = ldx ? (b * c->T + j) * ldx + h * c->D + d : at(c, b, h, j, d);
            acc += s[j] / sum * v[vj];
          }
          o[at(c, b, h, i, d)] = acc;
        }
      }
  free(s);
}

static void fwd_attention(double *const *x, double *y, const void *vc) {
  const attn_ctx *c = vc;
  if (c->fused) {
    int64_t C = c->H * c->D;
    attn_d(c, x[0], x[0] + C, x[0] + 2 * C, 3 * C, y);
  } else {
    attn_d(c, x[0], x[1], x[2], 0, y);
  }
}

static void case_attention(int64_t B, int64_t H, int64_t T, int64_t D, int layout, float scale) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_shape s = layout ? ts_shape4(B, T, H, D) : ts_shape4(B, H, T, D);
  ts_val x[3] = {ts_input(g, "q", TS_F32, s), ts_input(g, "k", TS_F32, s),
                 ts_input(g, "v", TS_F32, s)};
  ts_val y = layout ? ts_attention_bthd(g, x[0], x[1], x[2], scale)
                    : ts_attention(g, x[0], x[1], x[2], scale);
  attn_ctx c = {B, H, T, D, scale > 0 ? scale : 1.0 / sqrt((double)D), layout, 0};
  char what[128], b[64];
  snprintf(what, sizeof what, "attention %s %s scale %g", layout ? "bthd" : "bhtd",
           ts_shape_str(&s, b, sizeof b), (double)scale);
  gh_check(what, g, y, 3, x, &(gh_opts){.fwd = fwd_attention, .ctx = &c, .eps = 1e-4, .tol = 1e-4});
  ts_graph_free(g);
}

/* x (B,T,3C) -> split q,k,v (B,T,C) -> reshape (B,T,H,D) -> attention_bthd -> (B,T,C) */
static void case_gpt_chain(int64_t B, int64_t T, int64_t H, int64_t D) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  int64_t C = H * D;
  ts_val x = ts_input(g, "x", TS_F32, ts_shape3(B, T, 3 * C));
  ts_val qkv[3];
  CHECK_OK(ts_split(g, x, 2, (int64_t[]){C, C, C}, 3, qkv));
  for (int j = 0; j < 3; j++) qkv[j] = ts_reshape(g, qkv[j], ts_shape4(B, T, H, -1));
  ts_val o = ts_attention_bthd(g, qkv[0], qkv[1], qkv[2], 0.0f);
  ts_val y = ts_reshape(g, o, ts_shape3(B, T, C));
  attn_ctx c = {B, H, T, D, 1.0 / sqrt((double)D), 1, 1};
  gh_check("gpt chain x -> split -> reshape -> attention_bthd -> reshape", g, y, 1, &x,
           &(gh_opts){.fwd = fwd_attention, .ctx = &c, .eps = 1e-4, .tol = 1e-4});
  ts_graph_free(g);
}

/* the same chain with the packed op: x (B,T,3C) -> attention_qkv -> (B,T,C) */
static void case_packed(int64_t B, int64_t T, int64_t H, int64_t D, float scale) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  int64_t C = H * D;
  ts_val x = ts_input(g, "x", TS_F32, ts_shape3(B, T, 3 * C));
  ts_val y = ts_attention_qkv(g, x, (int)H, scale);
  ts_shape ys = ts_val_shape(g, y);
  CHECK(ys.ndim == 3 && ys.dims[2] == C);
  attn_ctx c = {B, H, T, D, scale > 0 ? scale : 1.0 / sqrt((double)D), 1, 1};
  char what[96];
  snprintf(what, sizeof what, "attention_qkv (%lld,%lld,3*%lld) heads %lld", (long long)B,
           (long long)T, (long long)C, (long long)H);
  gh_check(what, g, y, 1, &x,
           &(gh_opts){.fwd = fwd_attention, .ctx = &c, .eps = 1e-4, .tol = 1e-4});
  ts_graph_free(g);
}

static void bad_inputs(void) {
  ts_graph *g;
  ts_val q, k, v;
  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "q", TS_F32, ts_shape4(2, 3, 5, 8));
  k = ts_input(g, "k", TS_F32, ts_shape4(2, 3, 6, 8));
  CHECK_GRAPH_ERROR(g, ts_attention(g, q, k, q, 0.0f), TS_ESHAPE, "attention", "(2,3,6,8)", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "q", TS_F32, ts_shape3(2, 5, 8));
  CHECK_GRAPH_ERROR(g, ts_attention(g, q, q, q, 0.0f), TS_ESHAPE, "attention", "4-D", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "q", TS_F32, ts_shape4(1, 1, 4, 4));
  v = ts_input(g, "v", TS_BF16, ts_shape4(1, 1, 4, 4));
  CHECK_GRAPH_ERROR(g, ts_attention(g, q, q, v, 0.0f), TS_EDTYPE, "attention", "f32", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "q", TS_F32, ts_shape4(1, 1, 4, 4));
  CHECK_GRAPH_ERROR(g, ts_attention(g, q, q, q, -1.0f), TS_EINVAL, "attention", "scale", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "q", TS_F32, ts_shape4(1, 1, 4, 4));
  CHECK_GRAPH_ERROR(g, ts_attention(g, q, TS_NONE, q, 0.0f), TS_EINVAL, "attention", NULL, NULL);
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "qkv", TS_F32, ts_shape3(2, 5, 20));
  CHECK_GRAPH_ERROR(g, ts_attention_qkv(g, q, 3, 0.0f), TS_ESHAPE, "attention", "n_head (3)", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "qkv", TS_F32, ts_shape4(2, 5, 3, 8));
  CHECK_GRAPH_ERROR(g, ts_attention_qkv(g, q, 1, 0.0f), TS_ESHAPE, "attention", "3-D", NULL);
  ts_graph_free(g);
  printf("bad input: k shape, 3-D q, bf16 v, negative scale, TS_NONE, packed qkv width/rank\n");
}

int main(void) {
  case_attention(2, 3, 37, 16, 0, 0.0f);
  case_attention(1, 2, 70, 8, 1, 0.0f);  /* two query blocks in the fused kernels */
  case_attention(2, 1, 1, 4, 0, 0.5f);   /* T = 1 */
  case_attention(1, 2, 9, 5, 1, 0.9f);
  case_gpt_chain(2, 11, 2, 4);
  case_packed(2, 11, 2, 4, 0.0f);
  case_packed(1, 67, 3, 5, 0.3f); /* two query blocks */
  printf("attention: %d graphs ref+fast vs FD in double\n", gh_cases());
  bad_inputs();
  return ts_test_finish("test_grad_attention");
}
