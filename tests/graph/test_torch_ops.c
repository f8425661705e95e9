/* Every op against PyTorch: for each tests/fixtures/op_*.safetensors (part `ops` of
 * scripts/make_fixtures.py, format in docs/fixtures.md) this test builds the op with the public
 * builder API on graph inputs, runs it through the executor, compares the outputs with out<k>,
 * then builds loss = sum_k sum(out_k * dout_k) (ts_mul + ts_sum; the dout_k are inputs without
 * requires_grad), appends the backward with ts_graph_backward and compares the gradient of every
 * float input with grad_in<k>. Every case runs on both backends (TS_BACKEND_REF and
 * TS_BACKEND_FAST), and prints one PASS/FAIL line per case and backend with the largest errors.
 *
 * Also checked: BatchNorm running statistics updated in place in the bound state buffers
 * (aux.running_mean / aux.running_var; unchanged in eval mode), and the ops' documented auxiliary
 * outputs (batchnorm mean / biased var = aux.batch_mean / aux.batch_var, layernorm mean and
 * 1/sqrt(var+eps) = aux.mean / aux.rstd, attention lse = aux.lse). The attention fixtures are
 * also run through ts_attention_bthd (inputs permuted to (B,T,H,D), output permuted back) and
 * ts_attention_qkv (q, k, v as (B,T,H*D) concatenated into one packed (B,T,3C) input).
 *
 * Fixture values are float64 results rounded to f32; Tessera computes in f32. Tolerances
 * (|got - want| <= atol + rtol |want|, per op kind, see tol_for()):
 *   exact          data movement (reshape, permute, concat, split, slice, broadcast_to forward,
 *                  embedding forward, maxpool forward, relu/neg/abs) and casts (bit-exact
 *                  bf16/f16 outputs): the values are copied or rounded once, as in PyTorch.
 *   1e-6 + 1e-5    element-wise math (eltwise, binary, scale): one f32 rounding of the result
 *                  plus a few ulp of libm / oneDNN eltwise error.
 *   1e-5 + 1e-4    anything that sums (matmul, dense, conv, pooling, norms, softmax, cross
 *                  entropy, reductions, sum_to, gradients of broadcasts and embeddings,
 *                  attention): up to ~30-term f32 accumulations of O(1) terms, in an order
 *                  that differs between backends (oneDNN blocks its reductions).
 *
 * Expected failures: none. If a case must be marked, add "<fixture>:<ref|fast>" to XFAIL below;
 * the list is printed at start-up and a marked case still prints its FAIL line (as XFAIL), so
 * nothing is hidden. An XFAIL case that passes is reported as XPASS and counts as a failure (so
 * stale entries get removed). */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tessera/tessera.h"
#include "tessera/io.h"
#include "runtime/run_impl.h"
#include "test_util.h"

/* ------------------------------------------------------------------ expected failures */

static const char *const XFAIL[] = {
    NULL, /* e.g. "op_conv2d_groups:fast" -- keep empty unless a bug is reported and pending */
};

static int is_xfail(const char *fixture, const char *backend) {
  char key[256];
  snprintf(key, sizeof key, "%s:%s", fixture, backend);
  for (int i = 0; XFAIL[i]; i++)
    if (!strcmp(XFAIL[i], key)) return 1;
  return 0;
}

/* ------------------------------------------------------------------ fixture access */

#define MAXT 8

typedef struct {
  ts_dtype dt;
  ts_shape shape;
  size_t n;
  void *data; /* stored dtype, malloc'd */
} tens;

static void tens_free(tens *t) {
  free(t->data);
  t->data = NULL;
}

/* Copy of a stored tensor in its own dtype; 0 if absent. */
static int get(ts_st_file *f, const char *name, tens *t) {
  ts_tensor v;
  memset(t, 0, sizeof *t);
  if (ts_st_index(f, name) < 0) return 0;
  if (ts_st_find(f, name, &v)) return 0;
  t->dt = v.dtype;
  t->shape = v.shape;
  t->n = (size_t)ts_shape_numel(&v.shape);
  size_t bytes = ts_tensor_nbytes(&v);
  t->data = malloc(bytes ? bytes : 1);
  memcpy(t->data, v.data, bytes);
  return 1;
}

/* Stored tensor converted to f32 (malloc'd), or NULL. */
static float *get_f32(ts_st_file *f, const char *name, size_t *n, ts_shape *shape) {
  ts_tensor v;
  if (ts_st_index(f, name) < 0 || ts_st_find(f, name, &v)) return NULL;
  size_t m = (size_t)ts_shape_numel(&v.shape);
  float *d = malloc((m ? m : 1) * sizeof(float));
  if (ts_st_read(f, name, TS_F32, NULL, d)) {
    free(d);
    return NULL;
  }
  if (n) *n = m;
  if (shape) *shape = v.shape;
  return d;
}

static int jint(const cJSON *o, const char *k, int dflt) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(x) ? (int)x->valuedouble : dflt;
}
static double jnum(const cJSON *o, const char *k, double dflt) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(x) ? x->valuedouble : dflt;
}
static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(x) ? x->valuestring : "";
}
static int jints(const cJSON *o, const char *k, int64_t *out, int cap) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, k), *e;
  int n = 0;
  cJSON_ArrayForEach(e, a) if (n < cap) out[n++] = (int64_t)e->valuedouble;
  return n;
}

/* ------------------------------------------------------------------ tolerances */

typedef struct {
  double atol, rtol;
} tol;
static const tol EXACT = {0, 0}, ELT = {1e-6, 1e-5}, ACC = {1e-5, 1e-4};

/* Forward and gradient tolerance of a fixture (op name from metadata, attrs for eltwise). */
static void tol_for(const char *op, const char *alg, tol *fwd, tol *grad) {
  static const char *const moves[] = {"reshape", "permute", "concat", "split", "slice", "cast"};
  for (size_t i = 0; i < sizeof moves / sizeof *moves; i++)
    if (!strcmp(op, moves[i])) {
      *fwd = *grad = EXACT;
      return;
    }
  if (!strcmp(op, "broadcast_to") || !strcmp(op, "embedding") || !strcmp(op, "maxpool2d")) {
    *fwd = EXACT; /* copies / selects */
    *grad = ACC;  /* sums of upstream gradients */
    return;
  }
  if (!strcmp(op, "eltwise")) {
    if (!strcmp(alg, "relu") || !strcmp(alg, "neg") || !strcmp(alg, "abs")) {
      *fwd = *grad = EXACT;
      return;
    }
    *fwd = *grad = ELT;
    return;
  }
  if (!strcmp(op, "binary") || !strcmp(op, "scale")) {
    *fwd = *grad = ELT;
    return;
  }
  *fwd = *grad = ACC;
}

/* ------------------------------------------------------------------ comparison */

typedef struct {
  double maxerr;  /* largest |got - want| */
  double ratio;   /* largest |got - want| / (atol + rtol |want|); <= 1 passes */
  char what[160]; /* where the worst ratio was */
  int ok;
} cmp;

static void cmp_f32(cmp *c, const char *what, const float *got, const float *want, size_t n,
                    tol t) {
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)want[i]);
    if (isnan(got[i]) != isnan(want[i])) d = INFINITY;
    else if (isnan(got[i])) d = 0;
    double r = d == 0 ? 0 : d / (t.atol + t.rtol * fabs((double)want[i]));
    if (d > c->maxerr) c->maxerr = d;
    if (r > c->ratio || (r > 1 && c->ok)) {
      c->ratio = r;
      snprintf(c->what, sizeof c->what, "%s[%zu] %.9g vs %.9g", what, i, got[i], want[i]);
    }
    if (!(r <= 1)) c->ok = 0;
  }
}

static void cmp_bits(cmp *c, const char *what, const void *got, const void *want, size_t bytes,
                     size_t esize) {
  if (memcmp(got, want, bytes)) {
    size_t i = 0;
    while (i < bytes && ((const char *)got)[i] == ((const char *)want)[i]) i++;
    c->ok = 0;
    c->ratio = INFINITY;
    snprintf(c->what, sizeof c->what, "%s[%zu] bits differ", what, i / esize);
  }
}

/* ------------------------------------------------------------------ one fixture */

static int nfail_cases, npass_cases, nxfail_cases;

typedef struct {
  ts_graph *g;
  int nin, nout;
  tens in[MAXT];
  ts_val vin[MAXT];
  ts_val vout[MAXT];
  int no_grad[MAXT];
  /* auxiliary outputs to check: value + fixture name (+ transform) */
  ts_val aux_v[4];
  const char *aux_name[4];
  int aux_rstd[4]; /* compare 1/sqrt(v + eps) */
  float eps;
  int naux;
  int bn_states; /* inputs 3,4 are running stats (state values) */
  int bn_training;
} kase;

static ts_val node_out(ts_graph *g, ts_val y, int k) {
  int nd = ts_graph_producer(g, y);
  return nd < 0 ? TS_NONE : ts_graph_value(g, ts_graph_node_output(g, nd, k));
}

/* Builds the op of fixture `op` on kc->vin; fills kc->vout/nout. Returns 0 if op unknown. */
static int build_op(kase *kc, const char *op, const cJSON *at, int variant) {
  ts_graph *g = kc->g;
  ts_val *x = kc->vin;
  kc->nout = 1;
  if (!strcmp(op, "matmul")) {
    kc->vout[0] = ts_matmul(g, x[0], x[1], jint(at, "trans_a", 0), jint(at, "trans_b", 0));
  } else if (!strcmp(op, "dense")) {
    kc->vout[0] = ts_dense(g, x[0], x[1], jint(at, "has_bias", 0) ? x[2] : TS_NONE);
  } else if (!strcmp(op, "conv2d")) {
    kc->vout[0] = ts_conv2d(g, x[0], x[1], jint(at, "has_bias", 0) ? x[2] : TS_NONE,
                            jint(at, "stride_h", 1), jint(at, "stride_w", 1), jint(at, "pad_h", 0),
                            jint(at, "pad_w", 0), jint(at, "dil_h", 1), jint(at, "dil_w", 1),
                            jint(at, "groups", 1));
  } else if (!strcmp(op, "maxpool2d") || !strcmp(op, "avgpool2d")) {
    ts_val (*f)(ts_graph *, ts_val, int, int, int, int, int, int) =
        op[0] == 'm' ? ts_maxpool2d : ts_avgpool2d;
    kc->vout[0] = f(g, x[0], jint(at, "kh", 0), jint(at, "kw", 0), jint(at, "sh", 0),
                    jint(at, "sw", 0), jint(at, "ph", 0), jint(at, "pw", 0));
  } else if (!strcmp(op, "global_avgpool")) {
    kc->vout[0] = ts_global_avgpool(g, x[0]);
  } else if (!strcmp(op, "batchnorm")) {
    kc->vout[0] = ts_batchnorm(g, x[0], x[1], x[2], x[3], x[4], (float)jnum(at, "momentum", 0.1),
                               (float)jnum(at, "eps", 1e-5));
    if (kc->bn_training) {
      kc->aux_v[kc->naux] = node_out(g, kc->vout[0], 1), kc->aux_name[kc->naux++] = "aux.batch_mean";
      kc->aux_v[kc->naux] = node_out(g, kc->vout[0], 2), kc->aux_name[kc->naux++] = "aux.batch_var";
    }
  } else if (!strcmp(op, "layernorm")) {
    kc->eps = (float)jnum(at, "eps", 1e-5);
    kc->vout[0] = ts_layernorm(g, x[0], x[1], x[2], kc->eps);
    kc->aux_v[kc->naux] = node_out(g, kc->vout[0], 1), kc->aux_name[kc->naux++] = "aux.mean";
    kc->aux_v[kc->naux] = node_out(g, kc->vout[0], 2), kc->aux_rstd[kc->naux] = 1,
    kc->aux_name[kc->naux++] = "aux.rstd";
  } else if (!strcmp(op, "eltwise")) {
    static const char *const names[TS_ELT_COUNT] = {
        "relu", "gelu_tanh", "gelu_erf", "sigmoid", "tanh", "exp",
        "log",  "sqrt",      "square",   "abs",     "neg"};
    const char *alg = jstr(at, "alg");
    int a = -1;
    for (int i = 0; i < TS_ELT_COUNT; i++)
      if (!strcmp(alg, names[i])) a = i;
    if (a < 0) return 0;
    /* the named convenience builders where they exist, ts_eltwise otherwise */
    kc->vout[0] = a == TS_ELT_RELU        ? ts_relu(g, x[0])
                  : a == TS_ELT_GELU_TANH ? ts_gelu(g, x[0], 1)
                  : a == TS_ELT_GELU_ERF  ? ts_gelu(g, x[0], 0)
                  : a == TS_ELT_SIGMOID   ? ts_sigmoid(g, x[0])
                  : a == TS_ELT_TANH      ? ts_tanh(g, x[0])
                                          : ts_eltwise(g, x[0], (ts_eltwise_alg)a);
  } else if (!strcmp(op, "softmax")) {
    kc->vout[0] = ts_softmax(g, x[0], jint(at, "axis", -1));
  } else if (!strcmp(op, "log_softmax")) {
    kc->vout[0] = ts_log_softmax(g, x[0], jint(at, "axis", -1));
  } else if (!strcmp(op, "softmax_ce")) {
    if (jint(at, "ignore_index", -100) != -100) return 0;
    kc->vout[0] = ts_softmax_cross_entropy(g, x[0], x[1], (float)jnum(at, "label_smoothing", 0));
  } else if (!strcmp(op, "binary")) {
    const char *alg = jstr(at, "alg");
    kc->vout[0] = !strcmp(alg, "add")   ? ts_add(g, x[0], x[1])
                  : !strcmp(alg, "sub") ? ts_sub(g, x[0], x[1])
                  : !strcmp(alg, "mul") ? ts_mul(g, x[0], x[1])
                  : !strcmp(alg, "div") ? ts_div(g, x[0], x[1])
                                        : TS_NONE;
    if (kc->vout[0] == TS_NONE && ts_graph_status(g) == TS_OK) return 0;
  } else if (!strcmp(op, "scale")) {
    kc->vout[0] = ts_scale(g, x[0], (float)jnum(at, "alpha", 1), (float)jnum(at, "beta", 0));
  } else if (!strcmp(op, "sum_to") || !strcmp(op, "broadcast_to") || !strcmp(op, "reshape")) {
    int64_t d[TS_MAX_DIMS];
    int nd = jints(at, "shape", d, TS_MAX_DIMS);
    ts_shape s = ts_shape_make(nd, d);
    kc->vout[0] = op[0] == 's' ? ts_sum_to(g, x[0], s)
                  : op[0] == 'b' ? ts_broadcast_to(g, x[0], s)
                                 : ts_reshape(g, x[0], s);
  } else if (!strcmp(op, "permute")) {
    int64_t p[TS_MAX_DIMS];
    int perm[TS_MAX_DIMS];
    int np = jints(at, "perm", p, TS_MAX_DIMS);
    for (int i = 0; i < np; i++) perm[i] = (int)p[i];
    kc->vout[0] = ts_permute(g, x[0], perm);
  } else if (!strcmp(op, "concat")) {
    kc->vout[0] = ts_concat(g, x, kc->nin, jint(at, "axis", 0));
  } else if (!strcmp(op, "split")) {
    int64_t sz[MAXT];
    int n = jints(at, "sizes", sz, MAXT);
    ts_split(g, x[0], jint(at, "axis", 0), sz, n, kc->vout);
    kc->nout = n;
  } else if (!strcmp(op, "slice")) {
    kc->vout[0] = ts_slice(g, x[0], jint(at, "axis", 0), jint(at, "start", 0), jint(at, "end", 0));
  } else if (!strcmp(op, "embedding")) {
    kc->vout[0] = ts_embedding(g, x[0], x[1]);
  } else if (!strcmp(op, "reduce")) {
    const char *alg = jstr(at, "alg");
    uint32_t mask = (uint32_t)jint(at, "axes_mask", 0);
    int keep = jint(at, "keepdim", 0);
    kc->vout[0] = !strcmp(alg, "sum")    ? ts_sum(g, x[0], mask, keep)
                  : !strcmp(alg, "mean") ? ts_mean(g, x[0], mask, keep)
                  : !strcmp(alg, "max")  ? ts_max(g, x[0], mask, keep)
                                         : TS_NONE;
    if (kc->vout[0] == TS_NONE && ts_graph_status(g) == TS_OK) return 0;
  } else if (!strcmp(op, "attention")) {
    if (!jint(at, "causal", 1)) return 0;
    float scale = (float)jnum(at, "scale", 0);
    ts_val a;
    if (variant == 1) { /* (B,H,T,D) -> (B,T,H,D), attention_bthd, back */
      static const int p[4] = {0, 2, 1, 3};
      ts_val y = ts_attention_bthd(g, ts_permute(g, x[0], p), ts_permute(g, x[1], p),
                                   ts_permute(g, x[2], p), scale);
      a = y;
      kc->vout[0] = ts_permute(g, y, p);
    } else if (variant == 2) { /* packed: qkv (B,T,3C) = concat of the (B,T,H*D) views */
      static const int p[4] = {0, 2, 1, 3};
      ts_shape qs = ts_val_shape(g, x[0]);
      const int64_t B = qs.dims[0], H = qs.dims[1], T = qs.dims[2], D = qs.dims[3];
      ts_val parts[3];
      for (int i = 0; i < 3; i++)
        parts[i] = ts_reshape(g, ts_permute(g, x[i], p), ts_shape3(B, T, H * D));
      ts_val y = ts_attention_qkv(g, ts_concat(g, parts, 3, 2), (int)H, scale);
      a = y;
      kc->vout[0] = ts_permute(g, ts_reshape(g, y, ts_shape4(B, T, H, D)), p);
    } else {
      kc->vout[0] = a = ts_attention(g, x[0], x[1], x[2], scale);
    }
    kc->aux_v[kc->naux] = node_out(g, a, 1), kc->aux_name[kc->naux++] = "aux.lse";
  } else if (!strcmp(op, "cast")) {
    const char *dt = jstr(at, "dtype");
    ts_dtype t;
    if (ts_dtype_parse(dt, &t)) return 0;
    kc->vout[0] = ts_cast(g, x[0], t);
  } else {
    return 0;
  }
  return 1;
}

static void run_fixture(const char *path, const char *fname, int variant) {
  char label[160];
  snprintf(label, sizeof label, "%.*s%s", (int)(strlen(fname) - strlen(".safetensors")), fname,
           variant == 1 ? "(bthd)" : variant == 2 ? "(qkv)" : "");
  ts_st_file *f = NULL;
  int rc = ts_st_open(path, &f);
  CHECK_MSG(rc == TS_OK, "%s: %s", fname, ts_last_error());
  if (rc) return;
  const char *op = ts_st_meta(f, "op");
  cJSON *at = cJSON_Parse(ts_st_meta(f, "attrs") ? ts_st_meta(f, "attrs") : "{}");
  cJSON *ng = cJSON_Parse(ts_st_meta(f, "no_grad_inputs") ? ts_st_meta(f, "no_grad_inputs") : "[]");
  CHECK_MSG(op && at && ng, "%s: metadata op/attrs/no_grad_inputs missing or malformed", fname);
  if (!op || !at || !ng) goto out0;

  kase kc;
  memset(&kc, 0, sizeof kc);
  for (int k = 0; k < MAXT; k++) kc.vin[k] = kc.vout[k] = TS_NONE;
  {
    const cJSON *e;
    cJSON_ArrayForEach(e, ng) if ((int)e->valuedouble < MAXT) kc.no_grad[(int)e->valuedouble] = 1;
  }
  char nm[64];
  for (kc.nin = 0; kc.nin < MAXT; kc.nin++) {
    snprintf(nm, sizeof nm, "in%d", kc.nin);
    if (!get(f, nm, &kc.in[kc.nin])) break;
  }
  const int is_bn = !strcmp(op, "batchnorm");
  kc.bn_states = is_bn;
  kc.bn_training = is_bn && jint(at, "training", 1);

  ts_graph *g = NULL;
  CHECK_OK(ts_graph_create(&g));
  kc.g = g;
  ts_graph_set_training(g, is_bn ? kc.bn_training : 1);
  for (int k = 0; k < kc.nin; k++) {
    snprintf(nm, sizeof nm, "in%d", k);
    if (kc.bn_states && k >= 3)
      kc.vin[k] = ts_state_value(g, nm, kc.in[k].dt, kc.in[k].shape, -1);
    else
      kc.vin[k] = ts_input(g, nm, kc.in[k].dt, kc.in[k].shape);
    if (kc.no_grad[k]) ts_val_set_requires_grad(g, kc.vin[k], 0);
  }
  if (!build_op(&kc, op, at, variant)) {
    CHECK_MSG(0, "%s: no builder for op '%s' (attrs %s)", fname, op, ts_st_meta(f, "attrs"));
    goto out1;
  }
  /* loss = sum_k sum(out_k * dout_k) */
  ts_val loss = TS_NONE, vdout[MAXT];
  float *dout[MAXT] = {0};
  for (int k = 0; k < kc.nout; k++) {
    snprintf(nm, sizeof nm, "dout%d", k);
    ts_shape ds;
    size_t dn;
    dout[k] = get_f32(f, nm, &dn, &ds);
    CHECK_MSG(dout[k] != NULL, "%s: %s missing", fname, nm);
    if (!dout[k]) goto out1;
    vdout[k] = ts_input(g, nm, TS_F32, ds);
    ts_val_set_requires_grad(g, vdout[k], 0);
    ts_val o = kc.vout[k];
    if (ts_val_dtype(g, o) != TS_F32) o = ts_cast(g, o, TS_F32);
    ts_val p = ts_mul(g, o, vdout[k]);
    if (ds.ndim > 0) p = ts_sum(g, p, (1u << ds.ndim) - 1u, 0);
    loss = loss == TS_NONE ? p : ts_add(g, loss, p);
  }
  CHECK_MSG(ts_graph_status(g) == TS_OK, "%s: building: %s", label, ts_graph_error(g));
  if (ts_graph_status(g)) goto out2;
  rc = ts_graph_backward(g, loss, 1.0f);
  CHECK_MSG(rc == TS_OK, "%s: backward: %s", label, ts_graph_error(g));
  if (rc) goto out2;

  ts_val gin[MAXT];
  float *want_g[MAXT] = {0};
  for (int k = 0; k < kc.nin; k++) {
    gin[k] = TS_NONE;
    snprintf(nm, sizeof nm, "grad_in%d", k);
    want_g[k] = get_f32(f, nm, NULL, NULL);
    int wants = ts_dtype_is_float(kc.in[k].dt) && !kc.no_grad[k];
    CHECK_MSG((want_g[k] != NULL) == wants, "%s: grad_in%d presence", fname, k);
    gin[k] = ts_graph_grad(g, kc.vin[k]);
    CHECK_MSG((gin[k] != TS_NONE) == (want_g[k] != NULL), "%s: input %d %s a gradient", label, k,
              gin[k] != TS_NONE ? "unexpectedly has" : "has no");
  }
  tol tf, tg;
  tol_for(op, jstr(at, "alg"), &tf, &tg);

  for (int be = 0; be < 2; be++) {
    const char *bname = be ? "fast" : "ref";
    ts_backend_set(be ? TS_BACKEND_FAST : TS_BACKEND_REF);
    ts_val keep[3 * MAXT + 4];
    int nk = 0;
    keep[nk++] = loss;
    for (int k = 0; k < kc.nout; k++) keep[nk++] = kc.vout[k];
    for (int k = 0; k < kc.nin; k++)
      if (gin[k] != TS_NONE) keep[nk++] = gin[k];
    for (int k = 0; k < kc.naux; k++) keep[nk++] = kc.aux_v[k];
    ts_plan *p = NULL;
    cmp cf = {0, 0, "", 1}, cg = {0, 0, "", 1};
    char err[512] = "";
    void *state[MAXT] = {0};
    rc = ts_plan_create(g, keep, nk, &p);
    if (rc) {
      snprintf(err, sizeof err, "plan: %s", ts_last_error());
      goto report;
    }
    for (int k = 0; k < kc.nin; k++) {
      void *d = kc.in[k].data;
      if (kc.bn_states && k >= 3) { /* updated in place: a fresh copy per run */
        size_t b = kc.in[k].n * ts_dtype_size(kc.in[k].dt);
        state[k] = malloc(b);
        memcpy(state[k], d, b);
        d = state[k];
      }
      ts_plan_bind(p, kc.vin[k], d);
    }
    for (int k = 0; k < kc.nout; k++) ts_plan_bind(p, vdout[k], dout[k]);
    rc = ts_plan_run(p, 0);
    if (rc) {
      snprintf(err, sizeof err, "run: %s", ts_last_error());
      goto report;
    }
    /* forward */
    for (int k = 0; k < kc.nout; k++) {
      tens want;
      snprintf(nm, sizeof nm, "out%d", k);
      if (!get(f, nm, &want)) {
        snprintf(err, sizeof err, "%s missing", nm);
        break;
      }
      const void *got = ts_plan_data(p, kc.vout[k]);
      ts_shape gs = ts_val_shape(g, kc.vout[k]);
      if (!got || ts_val_dtype(g, kc.vout[k]) != want.dt || !ts_shape_equal(&gs, &want.shape)) {
        char a[64], b[64];
        snprintf(err, sizeof err, "%s: got %s %s, want %s %s", nm,
                 ts_dtype_name(ts_val_dtype(g, kc.vout[k])), ts_shape_str(&gs, a, sizeof a),
                 ts_dtype_name(want.dt), ts_shape_str(&want.shape, b, sizeof b));
        tens_free(&want);
        break;
      }
      if (want.dt == TS_F32)
        cmp_f32(&cf, nm, got, want.data, want.n, tf);
      else
        cmp_bits(&cf, nm, got, want.data, want.n * ts_dtype_size(want.dt), ts_dtype_size(want.dt));
      tens_free(&want);
    }
    /* auxiliary outputs */
    for (int k = 0; k < kc.naux && !err[0]; k++) {
      size_t n;
      float *want = get_f32(f, kc.aux_name[k], &n, NULL);
      const float *got = ts_plan_data(p, kc.aux_v[k]);
      ts_shape as = ts_val_shape(g, kc.aux_v[k]);
      if (!want || !got || (size_t)ts_shape_numel(&as) != n) {
        snprintf(err, sizeof err, "%s: missing or wrong size", kc.aux_name[k]);
        free(want);
        break;
      }
      float *t = malloc(n * sizeof(float));
      for (size_t i = 0; i < n; i++)
        t[i] = kc.aux_rstd[k] ? (float)(1.0 / sqrt((double)got[i] + kc.eps)) : got[i];
      cmp_f32(&cf, kc.aux_name[k], t, want, n, ACC);
      free(t);
      free(want);
    }
    /* running statistics, updated in place in the bound state memory */
    if (kc.bn_states && !err[0]) {
      for (int k = 3; k < 5; k++) {
        const char *an = k == 3 ? "aux.running_mean" : "aux.running_var";
        float *want = kc.bn_training ? get_f32(f, an, NULL, NULL) : NULL;
        if (kc.bn_training && !want) {
          snprintf(err, sizeof err, "%s missing", an);
          break;
        }
        /* eval mode: running stats must stay exactly as they were */
        cmp_f32(&cf, an, state[k], want ? want : (const float *)kc.in[k].data, kc.in[k].n,
                want ? ACC : EXACT);
        free(want);
      }
    }
    /* gradients */
    for (int k = 0; k < kc.nin && !err[0]; k++) {
      if (gin[k] == TS_NONE || !want_g[k]) continue;
      snprintf(nm, sizeof nm, "grad_in%d", k);
      const float *got = ts_plan_data(p, gin[k]);
      if (!got) {
        snprintf(err, sizeof err, "%s not readable", nm);
        break;
      }
      cmp_f32(&cg, nm, got, want_g[k], kc.in[k].n, tg);
    }
  report:;
    int ok = !err[0] && cf.ok && cg.ok;
    int xf = is_xfail(label, bname);
    ts_test_checks++;
    if (ok && !xf) {
      npass_cases++;
      printf("PASS  %-32s [%-4s] fwd maxerr %.2e (%.2f of tol %g+%g)  grad maxerr %.2e (%.2f of tol %g+%g)\n",
             label, bname, cf.maxerr, cf.ratio, tf.atol, tf.rtol, cg.maxerr, cg.ratio, tg.atol,
             tg.rtol);
    } else if (ok && xf) {
      ts_test_failures++, nfail_cases++;
      printf("XPASS %-32s [%-4s] listed in XFAIL but passes: remove it from the list\n", label,
             bname);
    } else {
      if (xf)
        nxfail_cases++;
      else
        ts_test_failures++, nfail_cases++;
      printf("%s %-32s [%-4s] %s%sfwd maxerr %.3g (%.3g of tol %g+%g%s%s)  grad maxerr %.3g "
             "(%.3g of tol %g+%g%s%s)\n",
             xf ? "XFAIL" : "FAIL ", label, bname, err, err[0] ? "; " : "", cf.maxerr, cf.ratio,
             tf.atol, tf.rtol, cf.ok ? "" : ", worst ", cf.ok ? "" : cf.what, cg.maxerr, cg.ratio,
             tg.atol, tg.rtol, cg.ok ? "" : ", worst ", cg.ok ? "" : cg.what);
    }
    for (int k = 0; k < MAXT; k++) free(state[k]);
    ts_plan_free(p);
  }
  ts_backend_set(TS_BACKEND_FAST);
  for (int k = 0; k < kc.nin; k++) free(want_g[k]);
out2:
  for (int k = 0; k < kc.nout; k++) free(dout[k]);
out1:
  ts_graph_free(g);
  for (int k = 0; k < kc.nin; k++) tens_free(&kc.in[k]);
out0:
  cJSON_Delete(at);
  cJSON_Delete(ng);
  ts_st_close(f);
}

static int cmpstr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(void) {
  printf("test_torch_ops: expected failures (XFAIL list):");
  int nx = 0;
  for (int i = 0; XFAIL[i]; i++, nx++) printf("\n  %s", XFAIL[i]);
  printf("%s\n", nx ? "" : " none");

  DIR *d = opendir(TS_FIXTURE_DIR);
  CHECK_MSG(d != NULL, "cannot open %s", TS_FIXTURE_DIR);
  if (!d) return ts_test_finish("test_torch_ops");
  char *names[512];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 512) {
    size_t l = strlen(e->d_name);
    if (!strncmp(e->d_name, "op_", 3) && l > 12 && !strcmp(e->d_name + l - 12, ".safetensors"))
      names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, cmpstr);
  /* the ops part of make_fixtures.py writes 88 files (docs/fixtures.md) */
  CHECK_MSG(n >= 88, "found only %d op_*.safetensors fixtures in %s (expected 88)", n,
            TS_FIXTURE_DIR);
  for (int i = 0; i < n; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", TS_FIXTURE_DIR, names[i]);
    run_fixture(path, names[i], 0);
    if (!strncmp(names[i], "op_attention", 12)) {
      run_fixture(path, names[i], 1);
      run_fixture(path, names[i], 2);
    }
    free(names[i]);
  }
  printf("test_torch_ops: %d fixtures, %d case x backend runs passed, %d failed, %d expected failures\n",
         n, npass_cases, nfail_cases, nxfail_cases);
  return ts_test_finish("test_torch_ops");
}
