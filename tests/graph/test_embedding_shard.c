/* Vocabulary-sharded embedding (ts_embedding_sharded; Megatron's vocab-parallel embedding)
 * through the graph, autodiff and executor, on one process: g = 1, 2, 4 shards of a (12,5)
 * table are simulated by running each shard's graph in turn.
 *   forward: the sum over the shards of the sharded lookups equals the full lookup exactly, and
 *   each shard gives its rows for ids in range and zero rows for the others (ids past the full
 *   table too: no upper bound check);
 *   backward (loss = sum(w * y)): each shard's table gradient (EMBEDDING_BWD) equals its rows of
 *   the full table's gradient exactly (same summation order);
 *   i32 and i64 ids, 1-d and 2-d ids, repeated ids; a negative id fails at run time (TS_ERANGE
 *   naming the op, the position and the id); a negative row offset at build time. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
#include "test_util.h"

enum { V = 12, D = 5 };

static float tval(int64_t r, int64_t c) { return (float)((r * 11 + c * 7) % 17) * 0.25f - 2.0f; }
static float wval(int64_t i) { return (float)((i * 5 + 2) % 13) * 0.5f - 3.0f; }

/* Lookup (sharded when offset >= 0: a table of Vl rows from `offset`) and its table gradient for
 * loss = sum(w * y). Returns the run status. */
static int run(ts_dtype idt, ts_shape ids_shape, const int64_t *ids, int64_t offset, int64_t Vl,
               float *y, float *dt) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val t = ts_input(g, "table", TS_F32, ts_shape2(Vl, D));
  ts_val id = ts_input(g, "ids", idt, ids_shape);
  ts_val e = offset >= 0 ? ts_embedding_sharded(g, t, id, offset) : ts_embedding(g, t, id);
  ts_shape ys = ts_val_shape(g, e);
  const int64_t ny = ts_shape_numel(&ys), n = ts_shape_numel(&ids_shape);
  ts_val w = ts_input(g, "w", TS_F32, ys);
  ts_val_set_requires_grad(g, w, 0);
  ts_val loss = ts_sum(g, ts_mul(g, e, w), (1u << ys.ndim) - 1u, 0);
  CHECK_OK(ts_graph_backward(g, loss, 1.0f));
  ts_val d = ts_graph_grad(g, t);
  CHECK_MSG(ts_graph_status(g) == TS_OK && d != TS_NONE, "build: %s", ts_graph_error(g));
  float *tf = malloc(sizeof(float) * (size_t)(Vl * D)), *wf = malloc(sizeof(float) * (size_t)ny);
  for (int64_t r = 0; r < Vl; r++)
    for (int64_t c = 0; c < D; c++) tf[r * D + c] = tval((offset > 0 ? offset : 0) + r, c);
  for (int64_t i = 0; i < ny; i++) wf[i] = wval(i);
  int32_t i32[64];
  for (int64_t i = 0; i < n; i++) i32[i] = (int32_t)ids[i];
  ts_val keep[2] = {e, d};
  ts_plan *p = NULL;
  int rc = ts_plan_create(g, keep, 2, &p);
  if (rc == TS_OK) {
    CHECK_OK(ts_plan_bind(p, t, tf));
    CHECK_OK(ts_plan_bind(p, id, idt == TS_I32 ? (void *)i32 : (void *)ids));
    CHECK_OK(ts_plan_bind(p, w, wf));
    rc = ts_plan_run(p, 0);
    if (rc == TS_OK) {
      memcpy(y, ts_plan_data(p, e), sizeof(float) * (size_t)ny);
      memcpy(dt, ts_plan_data(p, d), sizeof(float) * (size_t)(Vl * D));
    }
    ts_plan_free(p);
  }
  free(tf);
  free(wf);
  ts_graph_free(g);
  return rc;
}

static void check_shards(ts_dtype idt, ts_shape ids_shape, const int64_t *ids) {
  const int64_t n = ts_shape_numel(&ids_shape);
  float yfull[64 * D], dfull[V * D], ysum[64 * D], y[64 * D], dt[V * D];
  char s[64];
  ts_shape_str(&ids_shape, s, sizeof s);
  CHECK_OK(run(idt, ids_shape, ids, -1, V, yfull, dfull));
  for (int gs = 1; gs <= 4; gs *= 2) {
    const int64_t Vl = V / gs;
    memset(ysum, 0, sizeof ysum);
    int rows_ok = 1, grad_ok = 1;
    for (int q = 0; q < gs; q++) {
      const int64_t off = q * Vl;
      int rc = run(idt, ids_shape, ids, off, Vl, y, dt);
      CHECK_MSG(rc == TS_OK, "ids %s %s g %d shard %d: %s", s, ts_dtype_name(idt), gs, q, ts_last_error());
      if (rc) continue;
      for (int64_t i = 0; i < n; i++) {
        const int in = ids[i] >= off && ids[i] < off + Vl;
        for (int64_t c = 0; c < D; c++) {
          rows_ok &= y[i * D + c] == (in ? tval(ids[i], c) : 0.0f);
          ysum[i * D + c] += y[i * D + c];
        }
      }
      grad_ok &= memcmp(dt, dfull + off * D, sizeof(float) * (size_t)(Vl * D)) == 0;
    }
    CHECK_MSG(rows_ok, "ids %s %s g %d: a shard's rows (in range: the table's, else 0)", s, ts_dtype_name(idt), gs);
    CHECK_MSG(memcmp(ysum, yfull, sizeof(float) * (size_t)(n * D)) == 0,
              "ids %s %s g %d: the sum over the shards is not the full lookup", s, ts_dtype_name(idt), gs);
    CHECK_MSG(grad_ok, "ids %s %s g %d: a shard's dtable is not its rows of the full dtable", s,
              ts_dtype_name(idt), gs);
  }
}

static void check_errors(void) {
  float y[64 * D], dt[V * D];
  /* ids past the full table are another shard's: zeros, no error */
  const int64_t far[4] = {3, 100, 7, 1 << 20};
  CHECK_OK(run(TS_I64, ts_shape1(4), far, 4, 4, y, dt));
  int ok = 1;
  for (int c = 0; c < D; c++) ok &= y[c] == 0 && y[D + c] == 0 && y[2 * D + c] == tval(7, c) && y[3 * D + c] == 0;
  CHECK_MSG(ok, "ids beyond the full table give zero rows");
  /* a negative id */
  const int64_t neg[4] = {3, 5, -1, 2};
  for (int k = 0; k < 2; k++) {
    int rc = run(k ? TS_I32 : TS_I64, ts_shape1(4), neg, 4, 4, y, dt);
    const char *m = ts_last_error();
    CHECK_MSG(rc == TS_ERANGE && strstr(m, "embedding") && strstr(m, "id -1") && strstr(m, "position 2"),
              "negative id: %d %s", rc, m);
    if (k == 0) printf("negative id: \"%s\"\n", m);
  }
  /* a negative row offset */
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val t = ts_input(g, "table", TS_F32, ts_shape2(4, D));
  ts_val id = ts_input(g, "ids", TS_I64, ts_shape1(3));
  ts_val e = ts_embedding_sharded(g, t, id, -4);
  CHECK_MSG(e == TS_NONE && ts_graph_status(g) == TS_EINVAL && strstr(ts_graph_error(g), "embedding") &&
                strstr(ts_graph_error(g), "row offset -4") && strstr(ts_graph_error(g), "(4,5)"),
            "negative offset: %s", ts_graph_error(g));
  printf("negative offset: \"%s\"\n", ts_graph_error(g));
  ts_graph_free(g);
}

int main(void) {
  const int64_t ids1[10] = {0, 11, 5, 5, 3, 8, 0, 6, 11, 2};
  const int64_t ids2[12] = {1, 4, 4, 9, 10, 7, 1, 0, 3, 3, 11, 6};
  check_shards(TS_I64, ts_shape1(10), ids1);
  check_shards(TS_I32, ts_shape1(10), ids1);
  check_shards(TS_I64, ts_shape2(3, 4), ids2);
  check_shards(TS_I32, ts_shape2(3, 4), ids2);
  check_errors();
  return ts_test_finish("test_embedding_shard");
}
