/* GPT-2 / nanoGPT-style decoder-only transformer with nanoGPT parameter names and init. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tessera/zoo.h"

typedef struct {
  ts_nn *nn;
  const ts_gpt_config *cfg;
  int bias;
  float eps, std, proj_std, dropout;
  uint64_t seed;
  int ndrop; /* dropout sites emitted so far (each gets its own seed) */
} gpt_ctx;

static int graph_rc(ts_graph *g) {
  int rc = ts_graph_status(g);
  if (rc) ts_error_set(rc, "%s", ts_graph_error(g));
  return rc;
}

/* nn.Linear with nanoGPT init: weight (out,in) ~ N(0,std), bias zeros. */
static ts_val linear(gpt_ctx *c, const char *name, ts_val x, int64_t out, float std) {
  ts_graph *g = c->nn->g;
  if (x == TS_NONE || ts_graph_status(g)) return TS_NONE;
  ts_shape xs = ts_val_shape(g, x);
  int64_t in = xs.dims[xs.ndim - 1];
  ts_init wi = {TS_INIT_NORMAL, 0.0f, std, 0}, zero = {TS_INIT_ZEROS, 0, 0, 0};
  ts_graph_push_scope(g, name);
  ts_val w = ts_nn_param(c->nn, "weight", ts_shape2(out, in), wi, 0);
  ts_val b = c->bias ? ts_nn_param(c->nn, "bias", ts_shape1(out), zero, TS_PARAM_NO_DECAY) : TS_NONE;
  ts_val y = ts_dense(g, x, w, b);
  ts_graph_pop_scope(g);
  return y;
}

/* nanoGPT's fused c_attn, weight (3C,C) and bias (3C), as three projections reading the q, k and
 * v blocks of the same parameters (a reshape to (3,C,C) and a split: views, no copies), so that a
 * strategy can cut each projection's output by heads without any communication (the parallel
 * pass then holds the weight as (3,C,C) cut on dim 1). Same values as one (3C,C) dense. */
static void qkv_proj(gpt_ctx *c, ts_val x, ts_val *qkv) {
  ts_graph *g = c->nn->g;
  qkv[0] = qkv[1] = qkv[2] = TS_NONE;
  if (x == TS_NONE || ts_graph_status(g)) return;
  int64_t d = c->cfg->n_embd;
  ts_init wi = {TS_INIT_NORMAL, 0.0f, c->std, 0}, zero = {TS_INIT_ZEROS, 0, 0, 0};
  ts_graph_push_scope(g, "c_attn");
  ts_val w = ts_nn_param(c->nn, "weight", ts_shape2(3 * d, d), wi, 0);
  ts_val b = c->bias ? ts_nn_param(c->nn, "bias", ts_shape1(3 * d), zero, TS_PARAM_NO_DECAY) : TS_NONE;
  ts_val ws[3], bs[3] = {TS_NONE, TS_NONE, TS_NONE};
  const int64_t ones[3] = {1, 1, 1};
  ts_split(g, ts_reshape(g, w, ts_shape3(3, d, d)), 0, ones, 3, ws);
  if (b != TS_NONE) ts_split(g, ts_reshape(g, b, ts_shape2(3, d)), 0, ones, 3, bs);
  for (int k = 0; k < 3; k++) {
    ts_val wk = ts_reshape(g, ws[k], ts_shape2(d, d));
    ts_val bk = b != TS_NONE ? ts_reshape(g, bs[k], ts_shape1(d)) : TS_NONE;
    qkv[k] = ts_dense(g, x, wk, bk);
  }
  ts_graph_pop_scope(g);
}

/* LayerNorm over the last dim (weight 1, bias 0; without bias when cfg->no_bias). */
static ts_val layernorm(gpt_ctx *c, const char *name, ts_val x) {
  ts_graph *g = c->nn->g;
  if (x == TS_NONE || ts_graph_status(g)) return TS_NONE;
  ts_shape xs = ts_val_shape(g, x);
  int64_t d = xs.dims[xs.ndim - 1];
  ts_init one = {TS_INIT_ONES, 0, 0, 0}, zero = {TS_INIT_ZEROS, 0, 0, 0};
  ts_graph_push_scope(g, name);
  ts_val gm = ts_nn_param(c->nn, "weight", ts_shape1(d), one, TS_PARAM_NO_DECAY);
  ts_val bt = c->bias ? ts_nn_param(c->nn, "bias", ts_shape1(d), zero, TS_PARAM_NO_DECAY)
                      : ts_const(g, TS_F32, ts_shape1(d), 0.0f);
  ts_val y = ts_layernorm(g, x, gm, bt, c->eps);
  ts_graph_pop_scope(g);
  return y;
}

static ts_val dropout(gpt_ctx *c, ts_val x) {
  if (c->dropout <= 0) return x;
  return ts_dropout(c->nn->g, x, c->dropout, c->seed + (uint64_t)(c->ndrop++));
}

/* One pre-LN block: h + attn(ln_1(h)), then + mlp(ln_2(h)). h (B,T,d). */
static ts_val block(gpt_ctx *c, ts_val h, int64_t B, int64_t T) {
  ts_graph *g = c->nn->g;
  const ts_gpt_config *cfg = c->cfg;
  int64_t d = cfg->n_embd, H = cfg->n_head, Dh = d / H;
  int64_t hidden = (int64_t)(cfg->mlp_ratio ? cfg->mlp_ratio : 4) * d;
  static const int to_heads[4] = {0, 2, 1, 3}; /* (B,T,H,Dh) <-> (B,H,T,Dh) */

  ts_val a = layernorm(c, "ln_1", h);
  ts_graph_push_scope(g, "attn");
  ts_val parts[3];
  qkv_proj(c, a, parts);
  for (int k = 0; k < 3; k++)
    parts[k] = ts_permute(g, ts_reshape(g, parts[k], ts_shape4(B, T, H, Dh)), to_heads);
  ts_val y = ts_attention(g, parts[0], parts[1], parts[2], 0.0f);
  y = ts_reshape(g, ts_permute(g, y, to_heads), ts_shape3(B, T, d));
  y = linear(c, "c_proj", y, d, c->proj_std);
  ts_graph_pop_scope(g);
  h = ts_add(g, h, dropout(c, y));

  ts_val m = layernorm(c, "ln_2", h);
  ts_graph_push_scope(g, "mlp");
  m = ts_gelu(g, linear(c, "c_fc", m, hidden, c->std), 1);
  m = linear(c, "c_proj", m, d, c->proj_std);
  ts_graph_pop_scope(g);
  return ts_add(g, h, dropout(c, m));
}

static int check_config(const ts_gpt_config *cfg) {
  if (cfg->vocab_size < 1 || cfg->n_layer < 1 || cfg->n_head < 1 || cfg->n_embd < 1)
    return ts_error_set(TS_ECONFIG,
                        "gpt: vocab_size (%d), n_layer (%d), n_head (%d) and n_embd (%d) must be "
                        "positive", cfg->vocab_size, cfg->n_layer, cfg->n_head, cfg->n_embd);
  if (cfg->n_embd % cfg->n_head)
    return ts_error_set(TS_ECONFIG, "gpt: n_embd %d is not divisible by n_head %d", cfg->n_embd,
                        cfg->n_head);
  if (cfg->block_size < 0 || cfg->mlp_ratio < 0)
    return ts_error_set(TS_ECONFIG, "gpt: block_size (%d) and mlp_ratio (%d) must not be negative",
                        cfg->block_size, cfg->mlp_ratio);
  if (!(cfg->dropout >= 0 && cfg->dropout < 1))
    return ts_error_set(TS_ECONFIG, "gpt: dropout %g must be in [0,1)", (double)cfg->dropout);
  if (cfg->ln_eps < 0 || cfg->init_std < 0)
    return ts_error_set(TS_ECONFIG, "gpt: ln_eps %g and init_std %g must not be negative",
                        (double)cfg->ln_eps, (double)cfg->init_std);
  return TS_OK;
}

int64_t ts_zoo_gpt_num_params(const ts_gpt_config *cfg, int64_t T) {
  if (!cfg || check_config(cfg)) return -1;
  int64_t V = cfg->vocab_size, d = cfg->n_embd, b = cfg->no_bias ? 0 : 1;
  int64_t P = cfg->block_size ? cfg->block_size : T;
  int64_t r = cfg->mlp_ratio ? cfg->mlp_ratio : 4;
  if (P < 1) return -1;
  int64_t ln = d * (1 + b);
  int64_t per_layer = ln + (3 * d * d + 3 * d * b) + (d * d + d * b) /* attention */
                      + ln + (r * d * d + r * d * b) + (r * d * d + d * b); /* mlp */
  return V * d + P * d + cfg->n_layer * per_layer + ln + (cfg->tie_weights ? 0 : V * d);
}

int ts_zoo_gpt(ts_nn *nn, const ts_gpt_config *cfg, ts_val ids, ts_val targets, ts_val *logits,
               ts_val *loss) {
  if (logits) *logits = TS_NONE;
  if (loss) *loss = TS_NONE;
  if (!nn || !nn->g || !nn->p || !cfg) return ts_error_set(TS_EINVAL, "ts_zoo_gpt: null argument");
  ts_graph *g = nn->g;
  if (ts_graph_status(g)) return graph_rc(g);
  int rc = check_config(cfg);
  if (rc) return rc;
  if (ids == TS_NONE) return ts_error_set(TS_EINVAL, "gpt: input ids is TS_NONE");
  ts_shape is = ts_val_shape(g, ids);
  ts_dtype idt = ts_val_dtype(g, ids);
  char s[96];
  if (is.ndim != 2 || (idt != TS_I32 && idt != TS_I64))
    return ts_error_set(TS_ESHAPE, "gpt: ids%s:%s must be (B,T) i32 or i64",
                        ts_shape_str(&is, s, sizeof s), ts_dtype_name(idt));
  int64_t B = is.dims[0], T = is.dims[1], d = cfg->n_embd, V = cfg->vocab_size;
  int64_t P = cfg->block_size ? cfg->block_size : T;
  if (T > P)
    return ts_error_set(TS_ECONFIG, "gpt: sequence length %lld exceeds block_size %lld",
                        (long long)T, (long long)P);
  if (targets != TS_NONE) {
    ts_shape ts_ = ts_val_shape(g, targets);
    char s2[96];
    if (!ts_shape_equal(&ts_, &is))
      return ts_error_set(TS_ESHAPE, "gpt: targets%s must have the shape of ids%s",
                          ts_shape_str(&ts_, s, sizeof s), ts_shape_str(&is, s2, sizeof s2));
  }

  gpt_ctx c;
  c.nn = nn;
  c.cfg = cfg;
  c.bias = !cfg->no_bias;
  c.eps = cfg->ln_eps > 0 ? cfg->ln_eps : 1e-5f;
  c.std = cfg->init_std > 0 ? cfg->init_std : 0.02f;
  c.proj_std = c.std / sqrtf(2.0f * (float)cfg->n_layer); /* nanoGPT: c_proj weights */
  c.dropout = cfg->dropout;
  c.seed = cfg->dropout_seed;
  c.ndrop = 0;

  ts_init emb = {TS_INIT_NORMAL, 0.0f, c.std, 0};
  ts_graph_push_scope(g, "transformer");
  ts_val wte = ts_nn_param(nn, "wte.weight", ts_shape2(V, d), emb, 0);
  ts_val wpe = ts_nn_param(nn, "wpe.weight", ts_shape2(P, d), emb, 0);
  ts_val pos = T < P ? ts_slice(g, wpe, 0, 0, T) : wpe; /* positions 0..T-1: (T,d) */
  ts_val h = ts_add(g, ts_embedding(g, wte, ids), pos);  /* (B,T,d) + (T,d) */
  h = dropout(&c, h);
  ts_graph_push_scope(g, "h");
  for (int i = 0; i < cfg->n_layer; i++) {
    char nm[16];
    snprintf(nm, sizeof nm, "%d", i);
    ts_graph_push_scope(g, nm);
    h = block(&c, h, B, T);
    ts_graph_pop_scope(g);
  }
  ts_graph_pop_scope(g);
  h = layernorm(&c, "ln_f", h);
  ts_graph_pop_scope(g);

  ts_val head = wte;
  if (!cfg->tie_weights) head = ts_nn_param(nn, "lm_head.weight", ts_shape2(V, d), emb, 0);
  ts_val out = ts_dense(g, h, head, TS_NONE); /* (B,T,V) */
  ts_val l = TS_NONE;
  if (targets != TS_NONE)
    l = ts_softmax_cross_entropy(g, ts_reshape(g, out, ts_shape2(B * T, V)),
                                 ts_reshape(g, targets, ts_shape1(B * T)), 0.0f);
  rc = graph_rc(g);
  if (rc) return rc;
  if (logits) *logits = out;
  if (loss) *loss = l;
  return TS_OK;
}

/* One strategy of up to three inputs from its cut tuples (k dims each, 0-terminated rows). */
static ts_op_strategy mstrat(int n, const int64_t (*cuts)[4], const int *ndim) {
  ts_op_strategy s;
  memset(&s, 0, sizeof s);
  s.ninputs = n;
  for (int i = 0; i < n; i++) {
    s.ndim[i] = ndim[i];
    for (int d = 0; d < ndim[i]; d++) s.cuts[i][d] = cuts[i][d];
  }
  return s;
}

int ts_gpt_cp_algo(const ts_gpt_config *cfg, int cp, int tp, int algo) {
  if (algo != TS_CP_AUTO) return algo;
  int64_t ways = (int64_t)(cp > 1 ? cp : 1) * (tp > 1 ? tp : 1);
  return cfg && cfg->n_head % ways == 0 ? TS_CP_ULYSSES : TS_CP_RING;
}

int ts_gpt_context_strategies(const ts_gpt_config *cfg, int dp, int cp, int tp, int algo, ts_strategy_set *out) {
  algo = ts_gpt_cp_algo(cfg, cp, tp, algo);
  if (cp == 1) return ts_gpt_megatron_strategies(cfg, dp, tp, out);
  if (!cfg || !out || dp < 1 || tp < 1 || cp < 1)
    return ts_error_set(TS_EINVAL, "gpt context strategies: dp %d, cp %d, tp %d (need >= 1 and a set)", dp, cp, tp);
  if (ts_strategy_set_device_num(out) != dp * cp * tp)
    return ts_error_set(TS_EINVAL, "gpt context strategies: a set for %d devices, not dp %d x cp %d x tp %d",
                        ts_strategy_set_device_num(out), dp, cp, tp);
  if (algo != TS_CP_ULYSSES && algo != TS_CP_RING)
    return ts_error_set(TS_EINVAL, "gpt context strategies: unknown algorithm %d (0 ulysses, 1 ring)", algo);
  if (algo == TS_CP_ULYSSES && cfg->n_head % (cp * tp))
    return ts_error_set(TS_ECONFIG, "model.n_head: %d heads cannot be cut %d ways (context parallel %d x tensor "
                        "parallel %d: the Ulysses way cuts attention by heads; ring attention does not)",
                        cfg->n_head, cp * tp, cp, tp);
  if (algo == TS_CP_RING && cfg->n_head % tp)
    return ts_error_set(TS_ECONFIG, "model.n_head: %d heads cannot be cut %d ways", cfg->n_head, tp);
  if (cfg->block_size % cp)
    return ts_error_set(TS_ECONFIG, "model.block_size: a sequence of %d cannot be cut %d ways", cfg->block_size, cp);
  if (cfg->vocab_size % tp)
    return ts_error_set(TS_ECONFIG, "model.vocab_size: %d cannot be cut %d ways", cfg->vocab_size, tp);
  int64_t d = dp, c = cp, t = tp, ct = (int64_t)cp * tp;
  struct {
    const char *op;
    int n, ndim[3];
    int64_t cuts[3][4];
  } r[] = {
      {"transformer.embedding", 2, {2, 2}, {{d, c}, {t, 1}}},                                /* ids by batch and sequence */
      {"transformer.h.*.attn.c_attn.dense*", 3, {3, 2, 1}, {{d, c, 1}, {t, 1}, {t}}},
      {"transformer.h.*.attn.attention", 3, {4, 4, 4}, {{d, ct, 1, 1}, {d, ct, 1, 1}, {d, ct, 1, 1}}}, /* heads */
      {"transformer.h.*.attn.attention", 3, {4, 4, 4}, {{d, t, c, 1}, {d, t, c, 1}, {d, t, c, 1}}},     /* ring */
      {"transformer.h.*.attn.c_proj.dense", 2, {3, 2}, {{d, c, t}, {1, t}}},
      {"transformer.h.*.mlp.c_fc.dense", 2, {3, 2}, {{d, c, 1}, {t, 1}}},
      {"transformer.h.*.mlp.c_proj.dense", 2, {3, 2}, {{d, c, t}, {1, t}}},
      {"dense", 2, {3, 2}, {{d, c, 1}, {t, 1}}},
      {"softmax_ce", 2, {2, 1}, {{d * c, t}, {d * c}}},
  };
  for (size_t k = 0; k < sizeof r / sizeof r[0]; k++) {
    if (k == 2 + (algo == TS_CP_ULYSSES)) continue; /* the attention entry of the other algorithm */
    ts_op_strategy s = mstrat(r[k].n, r[k].cuts, r[k].ndim);
    int rc = ts_strategy_set_put(out, r[k].op, &s);
    if (rc) return ts_error_wrap(rc, "gpt context strategies: %s", r[k].op);
  }
  return TS_OK;
}

int ts_gpt_megatron_strategies(const ts_gpt_config *cfg, int dp, int tp, ts_strategy_set *out) {
  if (!cfg || !out || dp < 1 || tp < 1)
    return ts_error_set(TS_EINVAL, "gpt megatron strategies: dp %d, tp %d (need >= 1 and a set)", dp, tp);
  if (ts_strategy_set_device_num(out) != dp * tp)
    return ts_error_set(TS_EINVAL, "gpt megatron strategies: a set for %d devices, not dp %d x tp %d",
                        ts_strategy_set_device_num(out), dp, tp);
  if (cfg->n_head % tp) return ts_error_set(TS_ECONFIG, "model.n_head: %d heads cannot be cut %d ways", cfg->n_head, tp);
  if (cfg->vocab_size % tp)
    return ts_error_set(TS_ECONFIG, "model.vocab_size: %d cannot be cut %d ways", cfg->vocab_size, tp);
  int64_t d = dp, t = tp;
  /* (op, inputs): the cuts of each input, as Megatron-LM places them */
  struct {
    const char *op;
    int n, ndim[3];
    int64_t cuts[3][4];
  } r[] = {
      {"transformer.embedding", 2, {2, 2}, {{d, 1}, {t, 1}}},                          /* ids by batch, wte by vocab */
      {"transformer.h.*.attn.c_attn.dense*", 3, {3, 2, 1}, {{d, 1, 1}, {t, 1}, {t}}},  /* column parallel */
      {"transformer.h.*.attn.attention", 3, {4, 4, 4}, {{d, t, 1, 1}, {d, t, 1, 1}, {d, t, 1, 1}}}, /* heads */
      {"transformer.h.*.attn.c_proj.dense", 2, {3, 2}, {{d, 1, t}, {1, t}}},           /* row parallel */
      {"transformer.h.*.mlp.c_fc.dense", 2, {3, 2}, {{d, 1, 1}, {t, 1}}},
      {"transformer.h.*.mlp.c_proj.dense", 2, {3, 2}, {{d, 1, t}, {1, t}}},
      {"dense", 2, {3, 2}, {{d, 1, 1}, {t, 1}}},                                       /* the head by vocabulary */
      {"softmax_ce", 2, {2, 1}, {{d, t}, {d}}},                                        /* the loss by class */
  };
  for (size_t k = 0; k < sizeof r / sizeof r[0]; k++) {
    ts_op_strategy s = mstrat(r[k].n, r[k].cuts, r[k].ndim);
    int rc = ts_strategy_set_put(out, r[k].op, &s);
    if (rc) return ts_error_wrap(rc, "gpt megatron strategies: %s", r[k].op);
  }
  return TS_OK;
}
