/* The mixed-precision pass (ts_graph_amp): which dtype every op runs in at O1/O2/O3 (the table
 * of docs/mixed-precision.md, written out here independently of the pass), casts shared and
 * folded, parameters kept f32 with f32 gradients, names kept, refusals; and the numbers: a GPT,
 * an MLP and a ResNet forward+backward at O2 bf16 / f16 against the same f32 graph on the same
 * parameters (loss within 2% relative; every parameter's gradient within a relative L2 error
 * stated per model), and trained for a few SGD steps next to f32. 16-bit parameter leaves
 * (TS__AMP_PARAMS_LOW) against the f32 masters on the same rounded weights. */
#include <stdlib.h>
#include <string.h>

#include "graph/graph_ir.h"
#include "tessera/graph.h"
#include "tessera/nn.h"
#include "tessera/params.h"
#include "tessera/runtime.h"
#include "tessera/zoo.h"
#include "test_util.h"

enum { M_GPT, M_MLP, M_RESNET };

static ts_gpt_config gpt_cfg(void) {
  ts_gpt_config c = {.vocab_size = 40, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16, .tie_weights = 1};
  return c;
}

/* Builds model `kind` (forward + loss) into a new graph and store; applies amp level/dt. */
static int build_ex(int kind, int level, ts_dtype dt, int flags, ts_graph **pg, ts_params **pp, ts_val *x, ts_val *y,
                    ts_val *logits, ts_val *loss) {
  ts_graph *g;
  ts_params *p;
  CHECK_OK(ts_graph_create(&g));
  CHECK_OK(ts_params_create(&p));
  ts_nn nn = {g, p};
  int rc;
  if (kind == M_GPT) {
    ts_gpt_config c = gpt_cfg();
    *x = ts_input(g, "x", TS_I32, ts_shape2(2, 8));
    *y = ts_input(g, "y", TS_I32, ts_shape2(2, 8));
    rc = ts_zoo_gpt(&nn, &c, *x, *y, logits, loss);
  } else if (kind == M_MLP) {
    static const int hidden[] = {32, 24};
    ts_mlp_config c = {10, hidden, 2, 0};
    *x = ts_input(g, "x", TS_F32, ts_shape2(8, 48));
    *y = ts_input(g, "y", TS_I32, ts_shape1(8));
    rc = ts_zoo_mlp(&nn, &c, *x, *y, logits, loss);
  } else {
    ts_resnet_config c = {.depth = 8, .num_classes = 10};
    *x = ts_input(g, "x", TS_F32, ts_shape4(8, 3, 16, 16));
    *y = ts_input(g, "y", TS_I32, ts_shape1(8));
    rc = ts_zoo_resnet(&nn, &c, *x, *y, logits, loss);
  }
  CHECK_OK(rc);
  ts_val_set_requires_grad(g, *x, 0);
  ts_val v[4] = {*x, *y, *logits, *loss};
  CHECK_OK(ts__graph_amp_ex(g, level, dt, flags, v, 4));
  *x = v[0];
  *y = v[1];
  *logits = v[2];
  *loss = v[3];
  *pg = g;
  *pp = p;
  return rc;
}
static int build(int kind, int level, ts_dtype dt, ts_graph **pg, ts_params **pp, ts_val *x, ts_val *y,
                 ts_val *logits, ts_val *loss) {
  return build_ex(kind, level, dt, 0, pg, pp, x, y, logits, loss);
}


/* The dtype of the first float input of node i that is not persistent state. */
static ts_dtype compute_dtype(const ts_graph *g, int i) {
  for (int k = 0; k < ts_graph_node_num_inputs(g, i); k++) {
    int v = ts_graph_node_input(g, i, k);
    ts_dtype d = ts_graph_value_dtype(g, v);
    if (ts_dtype_is_float(d) && ts_graph_value_kind(g, v) != TS_VAL_STATE) return d;
  }
  return TS_I32;
}

/* The expected dtype of op at level (docs/mixed-precision.md's table); TS_I32: not checked. */
static ts_dtype expected(ts_op op, int level, ts_dtype low) {
  switch (op) {
    case TS_OP_MATMUL: case TS_OP_DENSE: case TS_OP_CONV2D: case TS_OP_ATTENTION: return low;
    case TS_OP_SOFTMAX: case TS_OP_REDUCE: return level == 3 ? low : TS_F32;
    /* the loss reads the logits as their producer (a white dense/matmul in every model here)
     * writes them: 16-bit at every level, no cast (its kernel computes in f32 from them) */
    case TS_OP_SOFTMAX_CE: return low;
    case TS_OP_BATCHNORM: case TS_OP_LAYERNORM: case TS_OP_ELTWISE: case TS_OP_BINARY: case TS_OP_SCALE:
    case TS_OP_DROPOUT: case TS_OP_MAXPOOL2D: case TS_OP_AVGPOOL2D: case TS_OP_EMBEDDING:
      return level >= 2 ? low : TS_F32;
    default: return TS_I32;
  }
}

static void check_structure(int kind, const char *name, int level, ts_dtype low) {
  ts_graph *g0, *g;
  ts_params *p0, *p;
  ts_val x, y, lg, loss;
  build(kind, 0, TS_F32, &g0, &p0, &x, &y, &lg, &loss);
  build(kind, level, low, &g, &p, &x, &y, &lg, &loss);
  int n = ts_graph_num_nodes(g), n0 = ts_graph_num_nodes(g0), casts = 0, checked = 0;
  CHECK_MSG(ts_graph_value_dtype(g, ts_graph_value_index(g, loss)) == TS_F32, "%s O%d: loss not f32", name, level);
  CHECK_MSG(ts_graph_value_dtype(g, ts_graph_value_index(g, lg)) == TS_F32, "%s O%d: logits not f32", name, level);
  /* every node of the f32 graph is in the amp graph, same name and op, in the same order */
  int j = 0;
  for (int i = 0; i < n; i++) {
    ts_op op = ts_graph_node_op(g, i);
    if (op == TS_OP_CAST) {
      casts++;
      int in = ts_graph_node_input(g, i, 0), out = ts_graph_node_output(g, i, 0);
      ts_dtype din = ts_graph_value_dtype(g, in), dout = ts_graph_value_dtype(g, out);
      CHECK_MSG(din != dout, "%s O%d: identity cast %s", name, level, ts_graph_node_name(g, i));
      /* no narrowing of a widening back to its original (folded) */
      int pr = ts_graph_value_producer(g, in);
      if (pr >= 0 && ts_graph_node_op(g, pr) == TS_OP_CAST)
        CHECK_MSG(ts_graph_value_dtype(g, ts_graph_node_input(g, pr, 0)) != dout, "%s O%d: cast %s not folded", name,
                  level, ts_graph_node_name(g, i));
      /* a temporary is cast at most once per dtype */
      if (pr >= 0)
        for (int k = i + 1; k < n; k++)
          if (ts_graph_node_op(g, k) == TS_OP_CAST && ts_graph_node_input(g, k, 0) == in)
            CHECK_MSG(ts_graph_value_dtype(g, ts_graph_node_output(g, k, 0)) != dout, "%s O%d: %s cast twice",
                      name, level, ts_graph_node_name(g, i));
      continue;
    }
    CHECK_MSG(j < n0 && ts_graph_node_op(g0, j) == op && !strcmp(ts_graph_node_name(g0, j), ts_graph_node_name(g, i)),
              "%s O%d: node %d %s is not the f32 graph's %d %s", name, level, i, ts_graph_node_name(g, i), j,
              j < n0 ? ts_graph_node_name(g0, j) : "-");
    j++;
    ts_dtype want = expected(op, level, low);
    if (want == TS_I32) continue;
    ts_dtype got = compute_dtype(g, i);
    checked++;
    CHECK_MSG(got == want, "%s O%d: %s runs in %s, expected %s", name, level, ts_graph_node_name(g, i),
              ts_dtype_name(got), ts_dtype_name(want));
    /* norm gamma/beta: f32 masters below O3, cast at O3 */
    if (op == TS_OP_BATCHNORM || op == TS_OP_LAYERNORM) {
      ts_dtype gd = ts_graph_value_dtype(g, ts_graph_node_input(g, i, 1));
      CHECK_MSG(gd == (level == 3 ? low : TS_F32), "%s O%d: %s gamma in %s", name, level, ts_graph_node_name(g, i),
                ts_dtype_name(gd));
    }
  }
  CHECK_MSG(j == n0, "%s O%d: %d of the f32 graph's %d nodes copied", name, level, j, n0);
  CHECK(checked > 0 && casts > 0);
  /* leaves keep their dtype: parameters f32 */
  for (int v = 0; v < ts_graph_num_values(g); v++)
    if (ts_graph_value_kind(g, v) == TS_VAL_PARAM) CHECK(ts_graph_value_dtype(g, v) == TS_F32);
  /* backward: every parameter's gradient is f32 */
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  int pg = 0;
  for (int v = 0; v < ts_graph_num_values(g); v++)
    if (ts_graph_value_kind(g, v) == TS_VAL_PARAM) {
      ts_val gr = ts_graph_grad(g, ts_graph_value(g, v));
      if (gr == TS_NONE) continue;
      pg++;
      CHECK_MSG(ts_val_dtype(g, gr) == TS_F32, "%s O%d: gradient of %s is %s", name, level, ts_graph_value_name(g, v),
                ts_dtype_name(ts_val_dtype(g, gr)));
    }
  CHECK(pg > 0);
  printf("%-6s O%d %s: %d nodes (f32 %d), %d casts, %d ops checked\n", name, level, ts_dtype_name(low), n, n0, casts,
         checked);
  ts_graph_free(g);
  ts_graph_free(g0);
  ts_params_free(p);
  ts_params_free(p0);
}

/* GPT's tied embedding: at O2 the table is cast once for the embedding and once for the head (a
 * leaf is cast per consumer), each cast read by exactly one node. */
static void check_leaf_casts(void) {
  ts_graph *g;
  ts_params *p;
  ts_val x, y, lg, loss;
  build(M_GPT, 2, TS_BF16, &g, &p, &x, &y, &lg, &loss);
  int wte = -1, casts = 0;
  for (int v = 0; v < ts_graph_num_values(g); v++)
    if (ts_graph_value_kind(g, v) == TS_VAL_PARAM && strstr(ts_graph_value_name(g, v), "wte")) wte = v;
  CHECK(wte >= 0);
  for (int i = 0; i < ts_graph_num_nodes(g); i++) {
    if (ts_graph_node_op(g, i) != TS_OP_CAST || ts_graph_node_input(g, i, 0) != wte) continue;
    casts++;
    int out = ts_graph_node_output(g, i, 0), readers = 0;
    for (int k = 0; k < ts_graph_num_nodes(g); k++)
      for (int q = 0; q < ts_graph_node_num_inputs(g, k); q++) readers += ts_graph_node_input(g, k, q) == out;
    CHECK_MSG(readers == 1, "a cast of wte read by %d nodes", readers);
  }
  CHECK_MSG(casts == 2, "wte cast %d times, expected 2 (embedding, head)", casts);
  ts_graph_free(g);
  ts_params_free(p);
}

/* A graph with casts written by hand: the pass keeps the needed ones and folds
 * bf16 -> f32 -> bf16 back to the bf16 value. */
static void check_folding(void) {
  ts_graph *g;
  ts_params *p;
  CHECK_OK(ts_graph_create(&g));
  CHECK_OK(ts_params_create(&p));
  ts_nn nn = {g, p};
  ts_val x = ts_input(g, "x", TS_F32, ts_shape2(4, 8));
  ts_val y = ts_input(g, "y", TS_I32, ts_shape1(4));
  ts_val w1 = ts_nn_param(&nn, "w1", ts_shape2(8, 8), (ts_init){TS_INIT_TORCH_DEFAULT, 0, 0, 0}, 0);
  ts_val w2 = ts_nn_param(&nn, "w2", ts_shape2(5, 8), (ts_init){TS_INIT_TORCH_DEFAULT, 0, 0, 0}, 0);
  ts_val h = ts_dense(g, ts_cast(g, x, TS_BF16), ts_cast(g, w1, TS_BF16), TS_NONE);
  ts_val z = ts_cast(g, h, TS_F32);
  ts_val lg = ts_dense(g, ts_cast(g, z, TS_BF16), ts_cast(g, w2, TS_BF16), TS_NONE);
  ts_val loss = ts_softmax_cross_entropy(g, ts_cast(g, lg, TS_F32), y, 0);
  CHECK_OK(ts_graph_status(g));
  int before = ts_graph_num_nodes(g);
  ts_val v[2] = {lg, loss};
  CHECK_OK(ts_graph_amp(g, 2, TS_BF16, v, 2));
  int d[2] = {-1, -1}, nd = 0;
  for (int i = 0; i < ts_graph_num_nodes(g); i++)
    if (ts_graph_node_op(g, i) == TS_OP_DENSE && nd < 2) d[nd++] = i;
  CHECK(nd == 2);
  if (nd == 2)
    CHECK_MSG(ts_graph_node_input(g, d[1], 0) == ts_graph_node_output(g, d[0], 0),
              "the second dense does not read the first's bf16 output directly");
  /* the logits are remapped to an f32 value: the model's own widening */
  CHECK(ts_val_dtype(g, v[0]) == TS_F32 && ts_val_dtype(g, v[1]) == TS_F32);
  CHECK_MSG(ts_graph_num_nodes(g) <= before, "%d nodes after, %d before", ts_graph_num_nodes(g), before);
  ts_graph_free(g);
  ts_params_free(p);
}

static void check_refusals(void) {
  ts_graph *g;
  ts_params *p;
  ts_val x, y, lg, loss;
  build(M_MLP, 0, TS_F32, &g, &p, &x, &y, &lg, &loss);
  int n = ts_graph_num_nodes(g);
  ts_val v[1] = {loss};
  CHECK_OK(ts_graph_amp(g, 0, TS_BF16, v, 1));
  CHECK(ts_graph_num_nodes(g) == n && v[0] == loss); /* O0: nothing */
  ts_graph *g2;
  ts_params *p2;
  ts_val loss1 = loss;
  build(M_MLP, 0, TS_F32, &g2, &p2, &x, &y, &lg, &loss);
  CHECK(ts_graph_amp(g2, 4, TS_BF16, v, 1) == TS_EINVAL);
  ts_graph_free(g2);
  ts_params_free(p2);
  build(M_MLP, 0, TS_F32, &g2, &p2, &x, &y, &lg, &loss);
  CHECK(ts_graph_amp(g2, 2, TS_F32, v, 1) == TS_EDTYPE);
  CHECK(strstr(ts_graph_error(g2), "bf16 or f16") != NULL);
  ts_graph_free(g2);
  ts_params_free(p2);
  CHECK_OK(ts_graph_backward(g, loss1, 1.0f));
  v[0] = loss1;
  CHECK(ts_graph_amp(g, 2, TS_BF16, v, 1) == TS_EGRAPH);
  CHECK(strstr(ts_graph_error(g), "backward") != NULL);
  ts_graph_free(g);
  ts_params_free(p);
}

/* ---- numbers: the amp graph against the f32 graph on the same parameters ---- */

typedef struct {
  ts_graph *g;
  ts_params *p;
  ts_plan *plan;
  ts_val x, y, lg, loss;
} inst;

static void inst_make_ex(inst *m, int kind, int level, ts_dtype dt, int flags) {
  memset(m, 0, sizeof *m);
  build_ex(kind, level, dt, flags, &m->g, &m->p, &m->x, &m->y, &m->lg, &m->loss);
  CHECK_OK(ts_graph_backward(m->g, m->loss, 1.0f));
  m->plan = ts_test_train_plan(m->g, m->p, m->loss, 11);
}

static void inst_make(inst *m, int kind, int level, ts_dtype dt) { inst_make_ex(m, kind, level, dt, 0); }

static void inst_free(inst *m) {
  ts_plan_free(m->plan);
  ts_params_free(m->p);
  ts_graph_free(m->g);
}

static void feed(inst *m, int kind, int step, float *xf, int32_t *xi, int32_t *yi) {
  ts_shape xs = ts_val_shape(m->g, m->x), ys = ts_val_shape(m->g, m->y);
  size_t nx = (size_t)ts_shape_numel(&xs), ny = (size_t)ts_shape_numel(&ys);
  int classes = kind == M_GPT ? gpt_cfg().vocab_size : 10;
  ts_test_fill(xf, nx, 300 + (uint64_t)step, -1, 1);
  for (size_t i = 0; i < nx; i++) xi[i] = (int32_t)((i * 7 + (size_t)step * 13) % (size_t)classes);
  for (size_t i = 0; i < ny; i++) yi[i] = (int32_t)((i * 5 + (size_t)step * 3 + 1) % (size_t)classes);
  CHECK_OK(ts_plan_bind(m->plan, m->x, kind == M_GPT ? (void *)xi : (void *)xf));
  CHECK_OK(ts_plan_bind(m->plan, m->y, yi));
}

/* Relative L2 error of a against b over n. */
static double rel_l2(const float *a, const float *b, size_t n) {
  double e = 0, r = 0;
  for (size_t i = 0; i < n; i++) {
    e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    r += (double)b[i] * b[i];
  }
  return r > 0 ? sqrt(e / r) : sqrt(e);
}

/* grad_tol: relative L2 error of all gradients together; param_tol: of each parameter's (0: not
 * checked); then `steps` SGD steps at rate lr: the final losses within loss_tol relative. */
static void check_numbers(int kind, const char *name, ts_dtype dt, double grad_tol, double param_tol, int steps,
                          double loss_tol, float lr) {
  inst a, b;
  inst_make(&a, kind, 0, TS_F32);
  inst_make(&b, kind, 2, dt);
  if (!a.plan || !b.plan) return;
  size_t n = ts_params_numel(a.p);
  CHECK(n == ts_params_numel(b.p));
  float *xf = malloc(sizeof(float) * 8192);
  int32_t *xi = malloc(sizeof(int32_t) * 8192), *yi = malloc(sizeof(int32_t) * 8192);
  double worst = 0, first = 0, dl = 0, glob = 0;
  float la0 = 0, la = 0, lb = 0;
  for (int s = 0; s < steps; s++) {
    feed(&a, kind, 0, xf, xi, yi); /* one batch, learnt by heart: the loss must fall */
    feed(&b, kind, 0, xf, xi, yi);
    CHECK_OK(ts_plan_run(a.plan, (uint64_t)s));
    CHECK_OK(ts_plan_run(b.plan, (uint64_t)s));
    la = *(float *)ts_plan_data(a.plan, a.loss);
    lb = *(float *)ts_plan_data(b.plan, b.loss);
    if (s == 0) la0 = la;
    CHECK_MSG(isfinite(lb), "%s %s: loss %g at step %d", name, ts_dtype_name(dt), (double)lb, s);
    float *ga = ts_params_grads(a.p), *gb = ts_params_grads(b.p);
    if (s == 0) { /* the same parameters: gradients parameter by parameter */
      for (int i = 0; i < ts_params_count(a.p); i++) {
        if (ts_params_flags(a.p, i) & TS_PARAM_STATE) continue;
        ts_shape sh = ts_params_shape(a.p, i);
        size_t off = ts_params_offset(a.p, i), cnt = (size_t)ts_shape_numel(&sh);
        double e = rel_l2(gb + off, ga + off, cnt);
        if (e > worst) worst = e;
        CHECK_MSG(param_tol <= 0 || e <= param_tol, "%s %s: gradient of %s: relative L2 error %.3g > %.3g", name,
                  ts_dtype_name(dt), ts_params_name(a.p, i), e, param_tol);
      }
      glob = rel_l2(gb, ga, n);
      CHECK_MSG(glob <= grad_tol, "%s %s: gradients' relative L2 error %.3g > %.3g", name, ts_dtype_name(dt), glob,
                grad_tol);
      first = fabs((double)lb - la) / fabs((double)la);
      CHECK_MSG(first <= 2e-2, "%s %s: loss %.6g vs f32 %.6g", name, ts_dtype_name(dt), (double)lb, (double)la);
    }
    /* SGD on both, each from its own gradients */
    float *wa = ts_params_data(a.p), *wb = ts_params_data(b.p);
    for (size_t i = 0; i < n; i++) {
      wa[i] -= lr * ga[i];
      wb[i] -= lr * gb[i];
    }
  }
  dl = fabs((double)lb - la) / fabs((double)la);
  CHECK_MSG(la < la0, "%s: f32 training did not move (%g -> %g)", name, (double)la0, (double)la);
  CHECK_MSG(dl <= loss_tol, "%s %s: after %d steps loss %.6g vs f32 %.6g", name, ts_dtype_name(dt), steps,
            (double)lb, (double)la);
  printf("%-6s O2 %s: step-1 loss rel diff %.2e, gradients rel L2 %.3e (worst parameter %.3e); after %d steps "
         "%.5f vs f32 %.5f\n", name, ts_dtype_name(dt), first, glob, worst, steps, (double)lb, (double)la);
  free(xf);
  free(xi);
  free(yi);
  inst_free(&a);
  inst_free(&b);
}

/* 16-bit parameter leaves (ts__graph_amp_ex, TS__AMP_PARAMS_LOW) at O2 against the f32 masters
 * cast per use, on the same weights rounded to the 16-bit dtype (so that every cast of a master
 * is exact): every parameter leaf and its gradient 16-bit, no cast reads a parameter (every op
 * that reads one runs low at O2 in these models), the loss bitwise the masters', and each
 * gradient bitwise the masters' (the cast's backward widens exactly) or, where the masters' one is
 * written in f32 straight from its f32 accumulation (a dense's dW, a norm's dgamma), bitwise its
 * rounding to 16 bits; a parameter read twice (the GPT's tied embedding) sums its two gradients in
 * 16 bits: within two roundings. */
static void check_params_low(int kind, const char *name, ts_dtype dt) {
  inst a, b;
  inst_make(&a, kind, 2, dt);
  inst_make_ex(&b, kind, 2, dt, TS__AMP_PARAMS_LOW);
  if (!a.plan || !b.plan) return;
  size_t n = ts_params_numel(a.p);
  CHECK(n == ts_params_numel(b.p));
  float *wa = ts_params_data(a.p);
  uint16_t *w16 = malloc(2 * n), *g16 = malloc(2 * n);
  CHECK_OK(ts_convert(wa, TS_F32, w16, dt, n)); /* the weights rounded: the masters hold them exactly */
  CHECK_OK(ts_convert(w16, dt, wa, TS_F32, n));
  int leaves = 0, casts = 0;
  for (int v = 0; v < ts_graph_num_values(b.g); v++) {
    if (ts_graph_value_kind(b.g, v) != TS_VAL_PARAM) continue;
    ts_val h = ts_graph_value(b.g, v);
    int id = ts_val_param_id(b.g, h);
    leaves++;
    CHECK_MSG(ts_graph_value_dtype(b.g, v) == dt, "%s: parameter leaf '%s' is %s", name, ts_params_name(b.p, id),
              ts_dtype_name(ts_graph_value_dtype(b.g, v)));
    CHECK_OK(ts_plan_bind(b.plan, h, w16 + ts_params_offset(b.p, id)));
  }
  for (int i = 0; i < ts_graph_num_nodes(b.g); i++)
    if (ts_graph_node_op(b.g, i) == TS_OP_CAST && ts_graph_value_kind(b.g, ts_graph_node_input(b.g, i, 0)) == TS_VAL_PARAM)
      casts++;
  CHECK_MSG(leaves > 0 && casts == 0, "%s: %d parameter leaves, %d casts of them", name, leaves, casts);
  for (int i = 0; i < ts_params_count(b.p); i++) {
    ts_val gv = ts_params_grad_value(b.p, i);
    if (gv == TS_NONE) continue;
    CHECK_MSG(ts_graph_value_dtype(b.g, ts_graph_value_index(b.g, gv)) == dt, "%s: the gradient of '%s' is not %s", name,
              ts_params_name(b.p, i), ts_dtype_name(dt));
    CHECK_OK(ts_plan_bind(b.plan, gv, g16 + ts_params_offset(b.p, i)));
  }
  float *xf = malloc(sizeof(float) * 8192), *gb = malloc(sizeof(float) * n);
  int32_t *xi = malloc(sizeof(int32_t) * 8192), *yi = malloc(sizeof(int32_t) * 8192);
  feed(&a, kind, 0, xf, xi, yi);
  feed(&b, kind, 0, xf, xi, yi);
  CHECK_OK(ts_plan_run(a.plan, 1));
  CHECK_OK(ts_plan_run(b.plan, 1));
  float la = *(float *)ts_plan_data(a.plan, a.loss), lb = *(float *)ts_plan_data(b.plan, b.loss);
  CHECK_MSG(la == lb, "%s: loss %.9g with 16-bit parameters, %.9g with f32 masters", name, (double)lb, (double)la);
  CHECK_OK(ts_convert(g16, dt, gb, TS_F32, n));
  const float *ga = ts_params_grads(a.p);
  uint16_t *ga16 = malloc(2 * n);
  CHECK_OK(ts_convert(ga, TS_F32, ga16, dt, n));
  int exact = 0, rounded = 0, near = 0;
  for (int i = 0; i < ts_params_count(a.p); i++) {
    if (ts_params_flags(a.p, i) & TS_PARAM_STATE) continue;
    ts_shape sh = ts_params_shape(a.p, i);
    size_t off = ts_params_offset(a.p, i), cnt = (size_t)ts_shape_numel(&sh);
    /* bitwise, or (where the masters' backward writes the f32 gradient straight from its f32
     * accumulation, a dense's dW, a norm's dgamma) bitwise its rounding to 16 bits */
    int same = !memcmp(ga + off, gb + off, cnt * sizeof(float));
    int same16 = !memcmp(ga16 + off, g16 + off, cnt * 2);
    double e = rel_l2(gb + off, ga + off, cnt);
    int tied = kind == M_GPT && strstr(ts_params_name(a.p, i), "wte") != NULL;
    CHECK_MSG(same || same16 || (tied && e <= 1.0 / 128), "%s: gradient of %s: relative L2 %.3g from the masters'%s",
              name, ts_params_name(a.p, i), e, tied ? " (more than a rounding)" : " (neither bitwise nor its rounding)");
    exact += same, rounded += !same && same16, near += !same && !same16;
  }
  printf("%-6s O2 %s, 16-bit parameter leaves: %d leaves, no casts of them, loss = the masters' (%.6f); %d gradients "
         "bitwise, %d the masters' rounded, %d within a rounding (summed in 16 bits)\n", name, ts_dtype_name(dt), leaves,
         (double)lb, exact, rounded, near);
  free(ga16);
  free(xf), free(gb), free(xi), free(yi), free(w16), free(g16);
  inst_free(&a);
  inst_free(&b);
}

/* TS__AMP_PARAMS_LOW below O2 is refused. */
static void check_params_low_refused(void) {
  ts_graph *g;
  ts_params *p;
  ts_val x, y, lg, loss;
  CHECK_OK(ts_graph_create(&g));
  CHECK_OK(ts_params_create(&p));
  ts_nn nn = {g, p};
  static const int hidden[] = {8};
  ts_mlp_config c = {4, hidden, 1, 0};
  x = ts_input(g, "x", TS_F32, ts_shape2(2, 6));
  y = ts_input(g, "y", TS_I32, ts_shape1(2));
  CHECK_OK(ts_zoo_mlp(&nn, &c, x, y, &lg, &loss));
  ts_val v[1] = {loss};
  EXPECT_ERR(ts__graph_amp_ex(g, 1, TS_BF16, TS__AMP_PARAMS_LOW, v, 1), TS_EINVAL, "16-bit parameters need level O2");
  ts_params_free(p);
  ts_graph_free(g);
}

int main(void) {
  ts_backend_set(TS_BACKEND_FAST);
  static const char *names[] = {"gpt", "mlp", "resnet"};
  for (int k = 0; k < 3; k++)
    for (int level = 1; level <= 3; level++) check_structure(k, names[k], level, level == 2 ? TS_F16 : TS_BF16);
  check_structure(M_GPT, "gpt", 2, TS_BF16);
  check_leaf_casts();
  check_folding();
  check_refusals();
  /* bf16 keeps 8 bits of mantissa, f16 11: the errors scale by about 8 (measured: MLP 2.2e-3 vs
   * 3.3e-4, GPT 4.3e-3 vs 5.6e-4). ResNet's are larger and scale less (6.9e-2 vs 2.7e-2): a
   * rounding flips relu signs after batch norm and reroutes single gradients, and batch norm's
   * dgamma/dbeta are sums over N*H*W that cancel (per-parameter errors up to 0.26 in bf16; the
   * same effect as test_lowp_ops' conv-bn-relu block) */
  check_numbers(M_MLP, "mlp", TS_BF16, 1e-2, 3e-2, 20, 3e-3, 0.1f);
  check_numbers(M_MLP, "mlp", TS_F16, 1.5e-3, 5e-3, 20, 5e-4, 0.1f);
  check_numbers(M_GPT, "gpt", TS_BF16, 1.5e-2, 3e-2, 20, 2e-2, 0.03f);
  check_numbers(M_GPT, "gpt", TS_F16, 2e-3, 5e-3, 20, 2e-2, 0.03f);
  check_numbers(M_RESNET, "resnet", TS_BF16, 1.2e-1, 0, 10, 2e-2, 0.02f);
  check_numbers(M_RESNET, "resnet", TS_F16, 5e-2, 0, 10, 5e-3, 0.02f);
  check_params_low(M_MLP, "mlp", TS_BF16);
  check_params_low(M_GPT, "gpt", TS_BF16);
  check_params_low(M_GPT, "gpt", TS_F16);
  check_params_low_refused();
  return ts_test_finish("amp");
}
