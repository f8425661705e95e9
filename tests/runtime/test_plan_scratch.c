/* Plans sharing a scratch arena (ts_plan_share_scratch, src/runtime/exec.c) and dry plans
 * (ts_plan_create_dry): two instances of one forward + backward graph, run as a pipeline runs its
 * micro-batches in flight (A's forward, B's forward, A's backward, B's backward), give exactly the
 * gradients and losses of unshared plans run whole, and keep less in their own arenas; a dry plan
 * plans the same peak and scratch without allocating, and refuses to run. */
#include <math.h>
#include <string.h>

#include "runtime/exec.h"
#include "tessera/runtime.h"
#include "test_util.h"

#define N 512

typedef struct {
  ts_graph *g;
  ts_val x, loss, gx;
  int nfwd;
} model;

/* loss = sum(h * x) with h = tanh-free chain of x*x scaled; temporaries die in forward, h and x are
 * read by backward */
static void build(model *m) {
  CHECK_OK(ts_graph_create(&m->g));
  ts_graph *g = m->g;
  m->x = ts_input(g, "x", TS_F32, ts_shape1(N));
  ts_val h = ts_mul(g, m->x, m->x);
  for (int i = 0; i < 6; i++) h = ts_scale(g, h, 0.5f, 0.25f); /* forward-only temporaries */
  m->loss = ts_sum(g, ts_mul(g, h, m->x), 1u, 0);
  m->nfwd = ts_graph_num_nodes(g);
  CHECK_OK(ts_graph_backward(g, m->loss, 1.0f));
  m->gx = ts_graph_grad(g, m->x);
  CHECK(m->gx != TS_NONE);
}

static void test_shared_scratch(void) {
  model m;
  build(&m);
  ts_val keep[] = {m.loss, m.gx};
  float xa[N], xb[N];
  ts_test_fill(xa, N, 1, -1, 1);
  ts_test_fill(xb, N, 2, -1, 1);
  /* reference: unshared plans, each run whole */
  ts_plan *ra, *rb;
  CHECK_OK(ts_plan_create(m.g, keep, 2, &ra));
  CHECK_OK(ts_plan_create(m.g, keep, 2, &rb));
  CHECK_OK(ts_plan_bind(ra, m.x, xa));
  CHECK_OK(ts_plan_bind(rb, m.x, xb));
  CHECK_OK(ts_plan_run(ra, 0));
  CHECK_OK(ts_plan_run(rb, 0));
  /* shared: A owns the scratch, B uses it; interleaved as a pipeline's 1F1B warm-up */
  ts_plan *a, *b;
  CHECK_OK(ts_plan_create(m.g, keep, 2, &a));
  CHECK_OK(ts_plan_create(m.g, keep, 2, &b));
  CHECK_OK(ts_plan_share_scratch(a, m.nfwd, a));
  CHECK_OK(ts_plan_share_scratch(b, m.nfwd, a));
  CHECK(ts_plan_share_scratch(b, ts_graph_num_nodes(m.g) + 1, a) == TS_EINVAL);
  CHECK_OK(ts_plan_bind(a, m.x, xa));
  CHECK_OK(ts_plan_bind(b, m.x, xb));
  CHECK_OK(ts_plan_run_range(a, 0, 0, m.nfwd));
  CHECK_OK(ts_plan_run_range(b, 0, 0, m.nfwd));
  CHECK_OK(ts_plan_run_range(a, 0, m.nfwd, -1));
  CHECK_OK(ts_plan_run_range(b, 0, m.nfwd, -1));
  CHECK_MSG(!memcmp(ts_plan_data(a, m.gx), ts_plan_data(ra, m.gx), sizeof(float) * N), "A's gradient differs");
  CHECK_MSG(!memcmp(ts_plan_data(b, m.gx), ts_plan_data(rb, m.gx), sizeof(float) * N), "B's gradient differs");
  CHECK(*(float *)ts_plan_data(a, m.loss) == *(float *)ts_plan_data(ra, m.loss));
  CHECK(*(float *)ts_plan_data(b, m.loss) == *(float *)ts_plan_data(rb, m.loss));
  size_t own = ts_plan_peak_bytes(a), scratch = ts_plan_scratch_bytes(a), whole = ts_plan_peak_bytes(ra);
  CHECK_MSG(own < whole && scratch > 0, "own arena %zu, scratch %zu, unshared %zu", own, scratch, whole);
  CHECK(ts_plan_scratch_arena_bytes(a) >= scratch && ts_plan_scratch_arena_bytes(b) == 0);
  CHECK(ts_plan_scratch_bytes(ra) == 0);
  /* dry: the same planned figures, nothing allocated, no run */
  ts_plan *d;
  CHECK_OK(ts_plan_create_dry(m.g, keep, 2, &d));
  CHECK_OK(ts_plan_share_scratch(d, m.nfwd, d));
  CHECK_OK(ts_plan_bind(d, m.x, NULL)); /* a dry plan records the binding, memory or not */
  CHECK(ts_plan_is_dry(d) && !ts_plan_is_dry(a));
  CHECK(ts_plan_peak_bytes(d) == own && ts_plan_scratch_bytes(d) == scratch);
  CHECK(ts_plan_arena_bytes(d) == 0 && ts_plan_scratch_arena_bytes(d) == 0 && ts_plan_data(d, m.loss) == NULL);
  EXPECT_ERR(ts_plan_run(d, 0), TS_EINVAL, "dry plan");
  ts_plan_free(d);
  ts_plan_free(b);
  ts_plan_free(a);
  ts_plan_free(rb);
  ts_plan_free(ra);
  ts_graph_free(m.g);
}

int main(void) {
  test_shared_scratch();
  return ts_test_finish("test_plan_scratch");
}
