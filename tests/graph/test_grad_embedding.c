/* Gradients of EMBEDDING through the graph, autodiff and executor, on both backends, against
 * central finite differences of a double-precision gather: i32 and i64 ids with repeated rows
 * (scatter-add), ids of several shapes, one table used by two lookups (gradients summed), ids
 * never get a gradient. Bad input: float ids, a table that is not 2-D, ids out of range at run
 * time (a status naming the op and the id, not a crash). Tolerance 1e-5. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"
#include "grad_harness.h"

typedef struct {
  int64_t D, nlook; /* rows looked up per ids input */
  int nids;         /* number of ids inputs (x[1..nids]) sharing table x[0] */
  int64_t nper[2];
} emb_ctx;

static void fwd_embedding(double *const *x, double *y, const void *vc) {
  const emb_ctx *c = vc;
  int64_t off = 0;
  for (int k = 0; k < c->nids; k++)
    for (int64_t n = 0; n < c->nper[k]; n++, off++)
      for (int64_t d = 0; d < c->D; d++) y[off * c->D + d] = x[0][(int64_t)x[1 + k][n] * c->D + d];
}

static void case_embedding(ts_dtype idt, ts_shape ids_shape, const int64_t *ids, int64_t V, int64_t D) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x[2];
  x[0] = ts_param_value(g, "table", TS_F32, ts_shape2(V, D), 0);
  x[1] = ts_input(g, "ids", idt, ids_shape);
  ts_val y = ts_embedding(g, x[0], x[1]);
  ts_shape ys = ts_val_shape(g, y);
  CHECK(ys.ndim == ids_shape.ndim + 1 && ys.dims[ys.ndim - 1] == D);
  int64_t n = ts_shape_numel(&ids_shape);
  int32_t i32[64];
  for (int64_t i = 0; i < n; i++) i32[i] = (int32_t)ids[i];
  const void *fixed[2] = {NULL, idt == TS_I32 ? (const void *)i32 : (const void *)ids};
  emb_ctx c = {D, n, 1, {n, 0}};
  char what[128], s[64];
  snprintf(what, sizeof what, "embedding table (%lld,%lld) ids %s %s", (long long)V, (long long)D,
           ts_shape_str(&ids_shape, s, sizeof s), ts_dtype_name(idt));
  gh_check(what, g, y, 2, x,
           &(gh_opts){.fwd = fwd_embedding, .ctx = &c, .data = fixed, .tol = 1e-5});
  ts_graph_free(g);
}

/* two lookups into one table, concatenated: the table gradient is the sum of both scatters */
static void case_shared_table(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val x[3];
  x[0] = ts_param_value(g, "table", TS_F32, ts_shape2(6, 3), 0);
  x[1] = ts_input(g, "ids1", TS_I64, ts_shape1(4));
  x[2] = ts_input(g, "ids2", TS_I64, ts_shape1(3));
  ts_val e[2] = {ts_embedding(g, x[0], x[1]), ts_embedding(g, x[0], x[2])};
  ts_val y = ts_concat(g, e, 2, 0);
  int64_t a[4] = {5, 1, 5, 0}, b[3] = {1, 1, 4};
  const void *fixed[3] = {NULL, a, b};
  emb_ctx c = {3, 0, 2, {4, 3}};
  gh_check("embedding: one table, two lookups (gradients summed)", g, y, 3, x,
           &(gh_opts){.fwd = fwd_embedding, .ctx = &c, .data = fixed, .tol = 1e-5});
  ts_graph_free(g);
}

static void bad_inputs(void) {
  ts_graph *g;
  CHECK_OK(ts_graph_create(&g));
  ts_val t = ts_input(g, "table", TS_F32, ts_shape2(10, 4));
  ts_val fid = ts_input(g, "ids", TS_F32, ts_shape1(3));
  CHECK_GRAPH_ERROR(g, ts_embedding(g, t, fid), TS_EDTYPE, "embedding", "i32 or i64", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  t = ts_input(g, "table", TS_F32, ts_shape1(10));
  ts_val ids = ts_input(g, "ids", TS_I32, ts_shape1(3));
  CHECK_GRAPH_ERROR(g, ts_embedding(g, t, ids), TS_ESHAPE, "embedding", "2-D", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  t = ts_input(g, "table", TS_I32, ts_shape2(10, 4));
  ids = ts_input(g, "ids", TS_I32, ts_shape1(3));
  CHECK_GRAPH_ERROR(g, ts_embedding(g, t, ids), TS_ESHAPE, "embedding", "float", NULL);
  ts_graph_free(g);

  CHECK_OK(ts_graph_create(&g));
  t = ts_input(g, "table", TS_F32, ts_shape2(10, 4));
  int64_t d8[8] = {1, 1, 1, 1, 1, 1, 1, 2};
  ids = ts_input(g, "ids", TS_I32, ts_shape_make(8, d8));
  CHECK_GRAPH_ERROR(g, ts_embedding(g, t, ids), TS_ESHAPE, "embedding", "more than 7 dims", NULL);
  ts_graph_free(g);

  /* out-of-range ids are found when the kernel runs */
  CHECK_OK(ts_graph_create(&g));
  t = ts_input(g, "table", TS_F32, ts_shape2(10, 4));
  ids = ts_input(g, "ids", TS_I32, ts_shape1(3));
  ts_val y = ts_embedding(g, t, ids);
  ts_plan *p = NULL;
  CHECK_OK(ts_plan_create(g, &y, 1, &p));
  if (p) {
    float tab[40] = {0};
    int32_t bad[3] = {1, 10, 2};
    CHECK_OK(ts_plan_bind(p, t, tab));
    CHECK_OK(ts_plan_bind(p, ids, bad));
    CHECK(ts_plan_run(p, 0) == TS_ERANGE);
    CHECK_MSG(strstr(ts_last_error(), "embedding") && strstr(ts_last_error(), "id 10"), "%s", ts_last_error());
    bad[1] = -3;
    CHECK(ts_plan_run(p, 0) == TS_ERANGE);
    bad[1] = 9;
    CHECK_OK(ts_plan_run(p, 0));
    ts_plan_free(p);
  }
  ts_graph_free(g);
  printf("bad input: float ids, 1-D table, integer table, 8-D ids, ids out of range at run time\n");
}

int main(void) {
  int64_t ids6[6] = {3, 0, 3, 10, 3, 7};
  case_embedding(TS_I32, ts_shape2(2, 3), ids6, 11, 5);
  case_embedding(TS_I64, ts_shape2(2, 3), ids6, 11, 5);
  int64_t ids5[5] = {6, 6, 6, 0, 1};
  case_embedding(TS_I64, ts_shape1(5), ids5, 7, 4);
  int64_t ids1[1] = {2};
  case_embedding(TS_I32, ts_shape_make(0, NULL), ids1, 3, 17); /* scalar id -> (D) */
  int64_t ids24[24];
  for (int i = 0; i < 24; i++) ids24[i] = (i * 7) % 9;
  case_embedding(TS_I32, ts_shape3(2, 3, 4), ids24, 9, 40);
  case_shared_table();
  printf("embedding: %d graphs (i32/i64, 0-3 dim ids, repeats, shared table) ref+fast vs FD\n",
         gh_cases());
  bad_inputs();
  return ts_test_finish("test_grad_embedding");
}
