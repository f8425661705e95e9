/* A plan on the GPU (ts_plan_set_device, src/runtime/run_gpu.c) against the same plan on the CPU:
 * a training graph (embedding -> dense -> layer norm -> gelu -> dropout -> dense -> relu -> dense
 * -> softmax cross-entropy, with its backward) run on both, the loss within 1e-5 and every
 * parameter's gradient within 1e-4 relative (f32; the GPU's sums run in another order), the
 * dropout mask the CPU's; twice on the GPU, bitwise the same (the graph also centres rows on
 * their maximum: REDUCE max, its backward, a broadcasting subtract). A node of an op without a
 * GPU kernel (a halo exchange) is refused when the plan is put on the GPU, naming it; a label out of range is reported after the run, naming the
 * node and the row. Device timing (the profiler's, ts_plan_set_device_timing): a run emits one
 * NODE_TIMED per node that ran, after the last NODE_END and before RUN_END, in node order, each span
 * within the run's host span, starts not decreasing, end >= start; off: none.
 *   test_exec_gpu        a real GPU (SKIPPED with the reason without one)
 *   test_exec_gpu fake   the stand-in driver (TESSERA_LIBCUDA), whose emulator runs the kernels
 *                        compiled for the host: the same comparisons on any machine (under ASan
 *                        the launches are only recorded: the plumbing, no numbers) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/dev.h"
#include "runtime/exec.h"
#include "tessera/graph.h"
#include "tessera/nn.h"
#include "tessera/params.h"
#include "tessera/runtime.h"
#include "test_util.h"

#define B 24
#define V 50
#define D 32

typedef struct {
  ts_graph *g;
  ts_params *p;
  ts_val ids, labels, loss;
  ts_val keep[64];
  int nk;
} net;

static void build(net *m, int conv) {
  CHECK_OK(ts_graph_create(&m->g));
  CHECK_OK(ts_params_create(&m->p));
  ts_graph_set_training(m->g, 1);
  ts_nn nn = {m->g, m->p};
  m->ids = ts_input(m->g, "ids", TS_I32, ts_shape1(B));
  m->labels = ts_input(m->g, "labels", TS_I32, ts_shape1(B));
  ts_val h = ts_nn_embedding(&nn, "emb", m->ids, V, D);
  /* rows centred on their maximum: REDUCE max (and its backward), a broadcasting subtract */
  h = ts_binary(m->g, h, ts_reduce(m->g, h, TS_RED_MAX, 2u, 1), TS_BIN_SUB);
  if (conv) /* a node of an op the GPU has no kernel for (a halo exchange over a group of 2) */
    h = ts_halo(m->g, h, 0, 2, 1, 1, 1);
  h = ts_gelu(m->g, ts_nn_layernorm(&nn, "ln", ts_nn_dense(&nn, "fc1", h, 48, 1), 1e-5f), 1);
  h = ts_dropout(m->g, h, 0.1f, 77);
  h = ts_relu(m->g, ts_nn_dense(&nn, "fc2", h, 40, 1));
  m->loss = ts_softmax_cross_entropy(m->g, ts_nn_dense(&nn, "fc3", h, 10, 1), m->labels, 0.05f);
  CHECK_OK(ts_graph_backward(m->g, m->loss, 1.0f));
  CHECK_OK(ts_params_alloc(m->p, 11));
  m->nk = 0;
  CHECK_OK(ts_params_attach_grads(m->p, m->g, m->keep, 63, &m->nk));
  m->keep[m->nk++] = m->loss;
}

/* the store's host buffers mirrored on the device: each binding moved to the same offset there */
typedef struct {
  ts__dev *d;
  ts_plan *plan;
  const char *hbase[3];
  size_t hlen[3];
  char *dbase[3];
} mirror;

static int bind_dev(ts_val v, void *data, void *user) {
  mirror *m = user;
  for (int k = 0; k < 3; k++)
    if (data && (const char *)data >= m->hbase[k] && (const char *)data < m->hbase[k] + m->hlen[k])
      return ts_plan_bind(m->plan, v, m->dbase[k] + ((const char *)data - m->hbase[k]));
  return ts_error_set(TS_EINVAL, "bind_dev: value %d is in none of the store's buffers", (int)v);
}

static void mirror_store(mirror *m, ts_params *p, ts_graph *g) {
  m->hbase[0] = (const char *)ts_params_data(p), m->hlen[0] = 4 * ts_params_numel(p);
  m->hbase[1] = (const char *)ts_params_grads(p), m->hlen[1] = 4 * ts_params_numel(p);
  m->hbase[2] = (const char *)ts_params_states(p), m->hlen[2] = 4 * ts_params_state_numel(p);
  for (int k = 0; k < 3; k++) {
    m->dbase[k] = NULL;
    if (!m->hlen[k]) continue;
    CHECK_OK(ts__dev_alloc(m->d, m->hlen[k], (void **)&m->dbase[k]));
    if (m->dbase[k]) CHECK_OK(ts__dev_copy(m->d, m->dbase[k], m->hbase[k], m->hlen[k], TS__H2D, NULL));
  }
  CHECK_OK(ts_params_each_binding(p, g, bind_dev, m));
}

/* NODE_TIMED events of a run (device timing) against its host events */
typedef struct {
  int begin_end, timed, after_end, order_ok;
  double t_run0, t_run1, last_t0;
  int last_node;
} timing;

static void timing_hook(const ts_hook_info *e, void *user) {
  timing *t = user;
  switch (e->event) {
    case TS_HOOK_RUN_BEGIN:
      t->t_run0 = ts_time_now();
      break;
    case TS_HOOK_NODE_END:
      t->begin_end++;
      t->after_end += t->timed > 0; /* a NODE_END after a NODE_TIMED: out of order */
      break;
    case TS_HOOK_NODE_TIMED:
      t->timed++;
      t->order_ok &= e->node > t->last_node && e->t0 >= t->last_t0 && e->t1 >= e->t0 && e->t0 >= t->t_run0 - 1e-3 &&
                     e->t1 <= ts_time_now() + 1e-3;
      t->last_node = e->node, t->last_t0 = e->t0;
      break;
    case TS_HOOK_RUN_END:
      t->t_run1 = ts_time_now();
      break;
    default:
      break;
  }
}

static void run(ts__dev *d, int fake) {
  net m;
  build(&m, 0);
  int ids[B], labels[B];
  for (int i = 0; i < B; i++) ids[i] = (i * 7) % V, labels[i] = (i * 3) % 10;
  /* the CPU */
  ts_plan *cpu = NULL;
  CHECK_OK(ts_plan_create(m.g, m.keep, m.nk, &cpu));
  CHECK_OK(ts_params_bind(m.p, m.g, cpu));
  CHECK_OK(ts_plan_bind(cpu, m.ids, ids));
  CHECK_OK(ts_plan_bind(cpu, m.labels, labels));
  size_t ng = ts_params_numel(m.p);
  float *g_cpu = malloc(4 * ng), *g_gpu = malloc(4 * ng), *g_gpu2 = malloc(4 * ng);
  CHECK_OK(ts_plan_run(cpu, 3));
  float l_cpu = *(const float *)ts_plan_data(cpu, m.loss);
  memcpy(g_cpu, ts_params_grads(m.p), 4 * ng);
  /* the GPU: another plan of the same graph, on device memory */
  ts_plan *gp = NULL;
  CHECK_OK(ts_plan_create(m.g, m.keep, m.nk, &gp));
  CHECK_OK(ts_plan_set_device(gp, d));
  mirror mr = {d, gp, {0}, {0}, {0}};
  mirror_store(&mr, m.p, m.g);
  void *dids = NULL, *dlab = NULL;
  CHECK_OK(ts__dev_alloc(d, sizeof ids, &dids));
  CHECK_OK(ts__dev_alloc(d, sizeof labels, &dlab));
  CHECK_OK(ts__dev_copy(d, dids, ids, sizeof ids, TS__H2D, NULL));
  CHECK_OK(ts__dev_copy(d, dlab, labels, sizeof labels, TS__H2D, NULL));
  CHECK_OK(ts_plan_bind(gp, m.ids, dids));
  CHECK_OK(ts_plan_bind(gp, m.labels, dlab));
  float l_gpu = -1, l_gpu2 = -2;
  int rc = ts_plan_run(gp, 3);
  CHECK_MSG(rc == TS_OK, "GPU run: %s", ts_last_error());
  CHECK(ts_plan_arena_bytes(gp) > 0);
  CHECK_OK(ts__dev_copy(d, &l_gpu, ts_plan_data(gp, m.loss), 4, TS__D2H, NULL));
  CHECK_OK(ts__dev_copy(d, g_gpu, mr.dbase[1], 4 * ng, TS__D2H, NULL));
  /* the second run with device timing: one NODE_TIMED per node that ran, in order, after them */
  timing tm = {0, 0, 0, 1, 0, 0, -1, -1};
  CHECK_OK(ts_plan_add_hook(gp, timing_hook, &tm));
  CHECK(!ts_plan_device_timing(gp));
  CHECK_OK(ts_plan_set_device_timing(gp, 1));
  CHECK(ts_plan_device_timing(gp));
  CHECK_OK(ts_plan_run(gp, 3));
  CHECK_OK(ts__dev_copy(d, &l_gpu2, ts_plan_data(gp, m.loss), 4, TS__D2H, NULL));
  CHECK_OK(ts__dev_copy(d, g_gpu2, mr.dbase[1], 4 * ng, TS__D2H, NULL));
  CHECK_OK(ts__dev_sync(d));
  CHECK_MSG(tm.timed == tm.begin_end && tm.timed > 10 && !tm.after_end && tm.order_ok,
            "device timing: %d NODE_TIMED for %d nodes run (%d NODE_END after them), in order %d", tm.timed, tm.begin_end,
            tm.after_end, tm.order_ok);
  CHECK_OK(ts_plan_set_device_timing(gp, 0));
  tm = (timing){0, 0, 0, 1, 0, 0, -1, -1};
  CHECK_OK(ts_plan_run(gp, 3));
  CHECK_MSG(tm.timed == 0 && tm.begin_end > 10, "device timing off: %d NODE_TIMED", tm.timed);
  ts_plan_remove_hook(gp, timing_hook, &tm);
  if (!fake) {
    printf("loss: CPU %.7f, GPU %.7f\n", l_cpu, l_gpu);
    CHECK_MSG(l_gpu >= l_cpu - 1e-5f * l_cpu && l_gpu <= l_cpu + 1e-5f * l_cpu, "loss: GPU %.8g, CPU %.8g", l_gpu, l_cpu);
    CHECK_CLOSE(g_gpu, g_cpu, ng, 1e-6, 1e-4, "gradients GPU vs CPU");
    CHECK_MSG(l_gpu2 == l_gpu && !memcmp(g_gpu2, g_gpu, 4 * ng), "the GPU's second run differs");
  }
  /* a label out of range: named after the run (on a real GPU; the stand-in runs no kernel) */
  labels[5] = 10;
  CHECK_OK(ts__dev_copy(d, dlab, labels, sizeof labels, TS__H2D, NULL));
  rc = ts_plan_run(gp, 4);
  if (!fake)
    CHECK_MSG(rc == TS_ERANGE && strstr(ts_last_error(), "row 5") && strstr(ts_last_error(), "softmax_ce"), "rc %d: %s", rc,
              ts_last_error());
  ts_plan_free(gp);
  ts_plan_free(cpu);
  for (int k = 0; k < 3; k++) ts__dev_free(d, mr.dbase[k]);
  ts__dev_free(d, dids), ts__dev_free(d, dlab);
  free(g_cpu), free(g_gpu), free(g_gpu2);
  ts_graph_free(m.g);
  ts_params_free(m.p);
  /* an op without a GPU kernel: refused when planned on the GPU, naming the node */
  labels[5] = 5;
  net c;
  build(&c, 1);
  CHECK_OK(ts_plan_create(c.g, c.keep, c.nk, &gp));
  CHECK_OK(ts_plan_set_device(gp, d));
  CHECK_OK(ts_params_bind(c.p, c.g, gp)); /* host pointers: never used, planning refuses first */
  CHECK_OK(ts_plan_bind(gp, c.ids, ids));
  CHECK_OK(ts_plan_bind(gp, c.labels, labels));
  EXPECT_ERR(ts_plan_run(gp, 1), TS_EUNSUPPORTED, "op halo", "no GPU kernel yet");
  ts_plan_free(gp);
  ts_graph_free(c.g);
  ts_params_free(c.p);
}

int main(int argc, char **argv) {
  int fake = argc > 1 && !strcmp(argv[1], "fake");
  ts__dev *d = NULL;
  int rc = ts__dev_open(TS_DEVICE_GPU, 0, &d);
  if (rc) {
    CHECK_MSG(!fake, "the stand-in driver did not open: %s", ts_last_error());
    ts_test_skip("no GPU: %s", ts_last_error());
    return ts_test_finish("test_exec_gpu");
  }
  int numbers = !fake; /* the stand-in driver's emulator runs the kernels: compare then too */
  if (fake) numbers = ts_test_stand_in_emulates();
  run(d, !numbers);
  ts__dev_close(d);
  return ts_test_finish("test_exec_gpu");
}
