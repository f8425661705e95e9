/* Ring attention (src/graph/op_ring_attention.c, src/runtime/run_ring_attention.c,
 * src/kernels/ring_attention.c) on this job's ranks: ctest's test_ring_attention (1 process, no
 * communicator), test_ring_attention_np2 and _np4 (mpirun, the world as the ring).
 *
 * Every rank builds the whole sequence's q, k, v (deterministic values, exact in bf16) and runs
 * the single-process causal attention (ts_attention / ts_attention_bthd) on it: the reference.
 * Then the ring: each rank gives its rows (in order, zigzag: chunks r and 2N-1-r of 2N, or in order
 * reordered to zigzag inside the op and back: zigzag 2, what the parallel pass emits), and
 * its output, log-sum-exp and the gradients of sum(w * o) with respect to its q, k and v rows
 * must be the reference's rows: f32 within 2e-5, bf16 (inputs exact, compute f32, one rounding
 * at the end) within 2^-7 relative + 1e-3. Sizes: rows per rank 6 (3 per chunk) and 70 (past the
 * kernel's 64-row query blocks), 2 batches, 2 heads, head dim 8; layouts (B,H,T,D) and (B,T,H,D).
 * The backward is one ring_attention_bwd node. Errors: zigzag over an odd number of rows, a bad
 * layout. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_ir.h"
#include "tessera/tessera.h"
#include "test_util.h"

static int g_rank, g_size;

static float val(int which, int64_t i) { /* multiples of 1/16 in [-1, 1): exact in bf16 */
  return (float)((int)((i * (7 + 2 * which) + 3 * which + 1) % 32) - 16) / 16.0f;
}

/* Global row of rank r's row i. */
static int64_t grow(int zig, int N, int r, int64_t T, int64_t i) {
  int64_t c = T / 2;
  return !zig ? r * T + i : i < c ? r * c + i : (2 * (int64_t)N - 1 - r) * c + (i - c);
}

/* Flat index of (b, h, t, d) in a tensor of the layout with Tn rows. */
static int64_t at(int layout, int64_t H, int64_t Tn, int64_t D, int64_t b, int64_t h, int64_t t, int64_t d) {
  return layout == 0 ? ((b * H + h) * Tn + t) * D + d : ((b * Tn + t) * H + h) * D + d;
}

static void *to_dt(const float *x, size_t n, ts_dtype dt) {
  void *b = malloc(n * ts_dtype_size(dt));
  CHECK_OK(ts_convert(x, TS_F32, b, dt, n));
  return b;
}

static void from_dt(const void *b, size_t n, ts_dtype dt, float *x) { CHECK_OK(ts_convert(b, dt, x, TS_F32, n)); }

typedef struct {
  float *o, *lse, *dq, *dk, *dv; /* f32 */
} result;

/* One graph: attention (ring when N > 0) of q, k, v (shape by layout with Tn rows) and the
 * gradients of sum(w * o). */
static int run_graph(int layout, int zig, int N, ts_comm *c, ts_dtype dt, int64_t B, int64_t H, int64_t Tn,
                     int64_t D, const float *qf, const float *kf, const float *vf, const float *wf, result *res,
                     const char *what) {
  ts_shape s = layout == 0 ? ts_shape4(B, H, Tn, D) : ts_shape4(B, Tn, H, D);
  size_t n = (size_t)ts_shape_numel(&s), nl = (size_t)(B * H * Tn);
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val q = ts_input(g, "q", dt, s), k = ts_input(g, "k", dt, s), v = ts_input(g, "v", dt, s);
  ts_val w = ts_input(g, "w", TS_F32, s);
  ts_val_set_requires_grad(g, w, 0);
  ts_val o = N > 0 ? ts_ring_attention(g, q, k, v, 0.0f, layout, 0, N, zig)
                   : layout == 0 ? ts_attention(g, q, k, v, 0.0f) : ts_attention_bthd(g, q, k, v, 0.0f);
  ts_val loss = ts_sum(g, ts_mul(g, ts_cast(g, o, TS_F32), w), 15u, 0);
  CHECK_OK(ts_graph_status(g));
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  int nbwd = 0, lse_node = -1;
  for (int i = 0; i < ts_graph_num_nodes(g); i++) {
    ts_op op = ts_graph_node_op(g, i);
    nbwd += op == TS_OP_RING_ATTENTION_BWD;
    if (op == TS_OP_RING_ATTENTION || op == TS_OP_ATTENTION) lse_node = i;
  }
  if (N > 0) CHECK_MSG(nbwd == 1, "%s: %d ring_attention_bwd nodes", what, nbwd);
  ts_val lse = lse_node >= 0 ? ts_graph_value(g, ts_graph_node_output(g, lse_node, 1)) : TS_NONE;
  ts_val keep[5] = {o, lse, ts_graph_grad(g, q), ts_graph_grad(g, k), ts_graph_grad(g, v)};
  ts_plan *p = NULL;
  int rc = ts_plan_create(g, keep, 5, &p);
  CHECK_OK(rc);
  void *qb = to_dt(qf, n, dt), *kb = to_dt(kf, n, dt), *vb = to_dt(vf, n, dt);
  if (p) {
    if (c) CHECK_OK(ts_plan_set_comm(p, 0, c));
    CHECK_OK(ts_plan_bind(p, q, qb));
    CHECK_OK(ts_plan_bind(p, k, kb));
    CHECK_OK(ts_plan_bind(p, v, vb));
    CHECK_OK(ts_plan_bind(p, w, (void *)wf));
    rc = ts_plan_run(p, 0);
    CHECK_MSG(rc == TS_OK, "%s: run: %s", what, ts_last_error());
    if (rc == TS_OK) {
      res->o = malloc(sizeof(float) * n), res->lse = malloc(sizeof(float) * nl);
      res->dq = malloc(sizeof(float) * n), res->dk = malloc(sizeof(float) * n), res->dv = malloc(sizeof(float) * n);
      from_dt(ts_plan_data(p, o), n, dt, res->o);
      memcpy(res->lse, ts_plan_data(p, lse), sizeof(float) * nl);
      from_dt(ts_plan_data(p, keep[2]), n, dt, res->dq);
      from_dt(ts_plan_data(p, keep[3]), n, dt, res->dk);
      from_dt(ts_plan_data(p, keep[4]), n, dt, res->dv);
    }
    ts_plan_free(p);
  }
  free(qb), free(kb), free(vb);
  ts_graph_free(g);
  return rc;
}

static void free_res(result *r) { free(r->o), free(r->lse), free(r->dq), free(r->dk), free(r->dv); }

static void check(int layout, int zig, ts_dtype dt, int64_t T, ts_comm *c) {
  const int N = g_size;
  const int64_t B = 2, H = 2, D = 8, NT = N * T;
  char what[160];
  snprintf(what, sizeof what, "ring attention N %d, T %lld per rank, layout %d, %s, %s", N, (long long)T, layout,
           zig == 2 ? "balanced (zigzag inside)" : zig ? "zigzag" : "in order", ts_dtype_name(dt));
  const size_t ng = (size_t)(B * H * NT * D), nloc = (size_t)(B * H * T * D);
  float *q = malloc(sizeof(float) * ng), *k = malloc(sizeof(float) * ng), *v = malloc(sizeof(float) * ng),
        *w = malloc(sizeof(float) * ng);
  for (size_t i = 0; i < ng; i++) q[i] = val(0, (int64_t)i), k[i] = val(1, (int64_t)i), v[i] = val(2, (int64_t)i),
                                  w[i] = val(3, (int64_t)i);
  result ref = {0}, got = {0};
  if (run_graph(layout, 0, 0, NULL, TS_F32, B, H, NT, D, q, k, v, w, &ref, what)) goto out;
  float *ql = malloc(sizeof(float) * nloc), *kl = malloc(sizeof(float) * nloc), *vl = malloc(sizeof(float) * nloc),
        *wl = malloc(sizeof(float) * nloc);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t t = 0; t < T; t++)
        for (int64_t d = 0; d < D; d++) {
          int64_t li = at(layout, H, T, D, b, h, t, d), gi = at(layout, H, NT, D, b, h, grow(zig == 1, N, g_rank, T, t), d);
          ql[li] = q[gi], kl[li] = k[gi], vl[li] = v[gi], wl[li] = w[gi];
        }
  if (!run_graph(layout, zig, N, c, dt, B, H, T, D, ql, kl, vl, wl, &got, what)) {
    const double rel = dt == TS_F32 ? 0 : 1.0 / 128, abs_tol = dt == TS_F32 ? 2e-5 : 1e-3;
    double worst[5] = {0};
    int bad = 0;
    for (int64_t b = 0; b < B; b++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t t = 0; t < T; t++) {
          int64_t gt = grow(zig == 1, N, g_rank, T, t);
          double e = fabs(got.lse[(b * H + h) * T + t] - ref.lse[(b * H + h) * NT + gt]);
          if (e > worst[1]) worst[1] = e;
          bad += e > 2e-5 * (1 + fabs(ref.lse[(b * H + h) * NT + gt]));
          for (int64_t d = 0; d < D; d++) {
            int64_t li = at(layout, H, T, D, b, h, t, d), gi = at(layout, H, NT, D, b, h, gt, d);
            const float *gv[4] = {got.o, got.dq, got.dk, got.dv}, *rv[4] = {ref.o, ref.dq, ref.dk, ref.dv};
            for (int m = 0; m < 4; m++) {
              double err = fabs(gv[m][li] - rv[m][gi]);
              if (err > worst[m ? m + 1 : 0]) worst[m ? m + 1 : 0] = err;
              bad += err > abs_tol + rel * fabs(rv[m][gi]);
            }
          }
        }
    CHECK_MSG(bad == 0, "%s (rank %d): %d elements off; worst |diff| o %.3g lse %.3g dq %.3g dk %.3g dv %.3g", what,
              g_rank, bad, worst[0], worst[1], worst[2], worst[3], worst[4]);
    if (g_rank == 0)
      printf("%s: worst |diff| o %.2g lse %.2g dq %.2g dk %.2g dv %.2g\n", what, worst[0], worst[1], worst[2],
             worst[3], worst[4]);
  }
  free_res(&got);
  free(ql), free(kl), free(vl), free(wl);
out:
  free_res(&ref);
  free(q), free(k), free(v), free(w);
}

static void check_errors(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val q = ts_input(g, "q", TS_F32, ts_shape4(1, 2, 5, 4));
  CHECK(ts_ring_attention(g, q, q, q, 0.0f, 0, 0, 2, 1) == TS_NONE);
  CHECK(ts_graph_status(g) == TS_ESHAPE && strstr(ts_graph_error(g), "zigzag"));
  ts_graph_free(g);
  CHECK_OK(ts_graph_create(&g));
  q = ts_input(g, "q", TS_F32, ts_shape4(1, 2, 6, 4));
  CHECK(ts_ring_attention(g, q, q, q, 0.0f, 2, 0, 2, 0) == TS_NONE);
  CHECK(ts_graph_status(g) == TS_EINVAL && strstr(ts_graph_error(g), "layout"));
  ts_graph_free(g);
}

int main(int argc, char **argv) {
  CHECK_OK(ts_comm_init(&argc, &argv));
  ts_comm *world = NULL;
  CHECK_OK(ts_comm_world(&world));
  g_rank = ts_comm_rank(world);
  g_size = ts_comm_size(world);
  check_errors();
  ts_comm *c = g_size > 1 ? world : NULL;
  static const int64_t Ts[2] = {6, 70};
  for (int ti = 0; ti < 2; ti++)
    for (int layout = 0; layout < 2; layout++)
      for (int zig = 0; zig < 3; zig++) check(layout, zig, TS_F32, Ts[ti], c);
  check(0, 1, TS_BF16, 70, c);
  check(1, 1, TS_BF16, 6, c);
  check(1, 2, TS_BF16, 70, c);
  ts_comm_free(world);
  return ts_test_finish_job("test_ring_attention");
}
