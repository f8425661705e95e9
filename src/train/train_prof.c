/* The trainer's side of the profiler (include/tessera/prof.h): a plan hook that turns executor
 * events into profiler events (one per executed node: its name, op, phase, FLOPs, the bytes and
 * group of collectives, shapes; and the forward / backward spans of each run), the trainer's own
 * spans, the peaks measured once (an sgemm calibration on the CPU, f32 and bf16 GEMMs on a GPU),
 * and at the end of fit the report over the ranks (printed by rank 0 and written to the metrics
 * file) and the merged Chrome trace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "device/gpu_kernels.h"
#include "../base/text.h"
#include "../kernels/matmul.h"
#include "graph/graph_ir.h"
#include "base/afile.h"
#include "train_impl.h"

typedef struct {
  double flops;
  int64_t bytes;
  int32_t group;
  uint8_t phase, coll, low;
  char *args;
} node_info;

struct ts__tprof {
  ts_prof *p;
  int owns_p;
  ts_dist *dist; /* its gradient buckets record into p (ts_dist_set_prof), until freed */
  ts_plan *plan;
  const ts_graph *g;
  node_info *ni;
  int nnodes;
  double t_run, t_bwd, t_node;
  int in_bwd;
  /* a plan on a GPU (ts_plan_set_device_timing): the nodes' spans are the device's (NODE_TIMED),
   * and the forward and backward spans theirs: the first node's start, the first backward node's,
   * the last node's end */
  int timed;
  double d_first, d_bwd, d_last;
  double reduce_bytes; /* per step per rank, gradient reduction (several ranks) */
  int world_size;
  int64_t start;
  double peak, peak_low; /* GFLOP/s: f32, and bf16 (0: f32's) */
  char peak_what[96];
};

/* ---- the peak: a few 512^3 sgemms, measured once per process ----
 * Both forms the ops use (a b as matmul, x w^T as dense); the faster is the peak. */
static double g_peak;

static double sgemm_gflops(int64_t n, int trans_b, const float *a, const float *b, float *c) {
  ts__mm_desc d = {1, n, n, n, 0, trans_b, 0, 0};
  if (ts__matmul_dnnl(&d, a, b, c)) return 0; /* warm-up: primitive creation, pages */
  double best = 0;
  for (int rep = 0; rep < 3; rep++) { /* the best of 3 batches of 3 */
    double t0 = ts_time_now();
    for (int k = 0; k < 3; k++) ts__matmul_dnnl(&d, a, b, c);
    double dt = ts_time_now() - t0, gf = dt > 0 ? 3 * 2.0 * (double)(n * n * n) / dt / 1e9 : 0;
    best = gf > best ? gf : best;
  }
  return best;
}

double ts__train_peak_gflops(void) {
  if (g_peak > 0) return g_peak;
  const int64_t n = 512;
  float *a = malloc(sizeof(float) * (size_t)(3 * n * n));
  if (!a) return 0;
  float *b = a + n * n, *c = b + n * n;
  for (int64_t i = 0; i < 2 * n * n; i++) a[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
  double nn = sgemm_gflops(n, 0, a, b, c), nt = sgemm_gflops(n, 1, a, b, c);
  free(a);
  g_peak = nn > nt ? nn : nt;
  return g_peak;
}

/* The peaks of the %peak column: on the CPU the sgemm calibration's (16-bit FLOPs against it
 * too); on a GPU the device's f32 and bf16 GEMM peaks (ts__gpu_gemm_peak), measured once per
 * process. */
static int peaks(ts__tprof *tp, const ts_plan *plan) {
  static double g32, g16;
  static int64_t n32, n16;
  ts__dev *d = ts_plan_device(plan);
  if (!d) {
    tp->peak = ts__train_peak_gflops();
    snprintf(tp->peak_what, sizeof tp->peak_what, "sgemm 512^3 calibration");
    return TS_OK;
  }
  int rc = TS_OK;
  if (g32 <= 0 && !rc) rc = ts__gpu_gemm_peak(d, TS_F32, &n32, &g32);
  if (g16 <= 0 && !rc) rc = ts__gpu_gemm_peak(d, TS_BF16, &n16, &g16);
  if (rc) return ts_error_wrap(rc, "log.profile: measuring the GPU's peak");
  tp->peak = g32;
  tp->peak_low = g16;
  snprintf(tp->peak_what, sizeof tp->peak_what, "GPU GEMMs through %s, f32 %lld^3, bf16 %lld^3",
           ts__gpu_gemm_impl(NULL), (long long)n32, (long long)n16);
  return TS_OK;
}

/* ---- per-node facts, computed once at install ---- */
static int64_t numel_of(const ts_graph *g, int v) { return ts_shape_numel(ts_graph_value_shape(g, v)); }

/* Bytes a collective node moves per rank (ring algorithms), as the parallel pass counts them. */
static void node_comm(const ts_graph *g, int j, int world, node_info *n) {
  ts_op op = ts_graph_node_op(g, j);
  const ts_attrs *a = ts_graph_node_attrs(g, j);
  if (op == TS_OP_HALO || op == TS_OP_HALO_BWD) { /* the halo rows this rank sends, at most */
    int x = ts_graph_node_input(g, j, 0), d = (int)ts_attr_halo_dim(a);
    const ts_shape *xs = ts_graph_value_shape(g, x);
    n->coll = 1;
    n->group = (int32_t)ts_attr_coll_group(a);
    if (n->group > 1 && xs->dims[d] > 0)
      n->bytes = (ts_attr_halo_lo(a) + ts_attr_halo_hi(a)) * (numel_of(g, x) / xs->dims[d]) *
                 (int64_t)ts_dtype_size(ts_graph_value_dtype(g, x));
    return;
  }
  if (op >= TS_OP_ALLREDUCE && op <= TS_OP_ALLTOALL) {
    int x = ts_graph_node_input(g, j, 0);
    double s = (double)numel_of(g, x) * (double)ts_dtype_size(ts_graph_value_dtype(g, x));
    double gs = (double)ts_attr_coll_group(a);
    n->coll = 1;
    n->group = (int32_t)gs;
    if (gs <= 1) return;
    n->bytes = (int64_t)(op == TS_OP_ALLREDUCE   ? 2 * (gs - 1) / gs * s
                         : op == TS_OP_ALLGATHER ? (gs - 1) * s
                                                 : (gs - 1) / gs * s);
    return;
  }
  /* ops with a communicator slot: an all-reduce of per-channel (SyncBatchNorm: sum, sum of
   * squares) or per-row (class-sharded cross-entropy: max, sum) statistics over the world */
  double stats = 0;
  if ((op == TS_OP_BATCHNORM || op == TS_OP_BATCHNORM_BWD) && ts_attr_batchnorm_sync(a)) {
    const ts_shape *x = ts_graph_value_shape(g, ts_graph_node_input(g, j, op == TS_OP_BATCHNORM ? 0 : 1));
    stats = x->ndim > 1 ? 2.0 * (double)x->dims[1] : 0;
  } else if ((op == TS_OP_SOFTMAX_CE || op == TS_OP_SOFTMAX_CE_BWD) && ts_attr_softmax_ce_sync(a)) {
    const ts_shape *x = ts_graph_value_shape(g, ts_graph_node_input(g, j, op == TS_OP_SOFTMAX_CE ? 0 : 1));
    stats = x->ndim > 1 ? 2.0 * (double)(ts_shape_numel(x) / x->dims[x->ndim - 1]) : 0;
  } else {
    return;
  }
  n->coll = 1;
  n->group = world;
  if (world > 1) n->bytes = (int64_t)(2.0 * (world - 1) / world * stats * 4);
}

static void shape_json(char *buf, size_t cap, size_t *k, const ts_shape *s) {
  ts__app(buf, cap, k, "[");
  for (int d = 0; d < s->ndim; d++) ts__app(buf, cap, k, "%s%lld", d ? "," : "", (long long)s->dims[d]);
  ts__app(buf, cap, k, "]");
}

static char *node_args(const ts_graph *g, int j) {
  char buf[1024];
  size_t k = 0;
  ts__app(buf, sizeof buf, &k, "\"in\":[");
  for (int i = 0; i < ts_graph_node_num_inputs(g, j); i++) {
    if (i) ts__app(buf, sizeof buf, &k, ",");
    shape_json(buf, sizeof buf, &k, ts_graph_value_shape(g, ts_graph_node_input(g, j, i)));
  }
  ts__app(buf, sizeof buf, &k, "],\"out\":");
  shape_json(buf, sizeof buf, &k, ts_graph_value_shape(g, ts_graph_node_output(g, j, 0)));
  if (k >= sizeof buf - 1) return strdup("\"in\":\"(long)\""); /* cut: keep the JSON valid */
  return strdup(buf);
}

/* ---- the hook ---- */
static void span(ts__tprof *tp, const char *name, int kind, double t0, double t1, int64_t bytes) {
  ts_prof_event e;
  memset(&e, 0, sizeof e);
  e.name = name;
  e.cat = "trainer";
  e.kind = (uint8_t)kind;
  e.t0 = t0;
  e.t1 = t1;
  e.bytes = bytes;
  if (bytes) {
    e.coll = 1;
    e.group = tp->world_size;
  }
  ts_prof_record(tp->p, &e);
}

static void hook(const ts_hook_info *h, void *user) {
  ts__tprof *tp = user;
  if (!ts_prof_active(tp->p) || h->g != tp->g) return;
  double now = ts_time_now();
  switch (h->event) {
    case TS_HOOK_RUN_BEGIN:
      tp->t_run = now;
      tp->in_bwd = 0;
      tp->timed = ts_plan_device_timing(tp->plan);
      tp->d_first = tp->d_bwd = tp->d_last = 0;
      break;
    case TS_HOOK_NODE_BEGIN:
      if (tp->timed) break;
      if (tp->ni[h->node].phase && !tp->in_bwd) { /* the first backward node ends the forward span */
        span(tp, "forward", TS_PROF_FORWARD, tp->t_run, now, 0);
        tp->t_bwd = now;
        tp->in_bwd = 1;
      }
      tp->t_node = now;
      break;
    case TS_HOOK_NODE_END:
    case TS_HOOK_NODE_TIMED: {
      if ((h->event == TS_HOOK_NODE_TIMED) != tp->timed) break; /* a GPU's nodes: their device spans */
      const node_info *n = &tp->ni[h->node];
      if (tp->timed) {
        if (!tp->d_first) tp->d_first = h->t0;
        if (n->phase && !tp->d_bwd) tp->d_bwd = h->t0;
        tp->d_last = h->t1;
      }
      ts_prof_event e;
      e.name = h->node_name;
      e.cat = h->op_name;
      e.args = n->args;
      e.t0 = tp->timed ? h->t0 : tp->t_node;
      e.t1 = tp->timed ? h->t1 : now;
      e.flops = n->flops;
      e.bytes = n->bytes;
      e.group = n->group;
      e.kind = TS_PROF_NODE;
      e.phase = n->phase;
      e.coll = n->coll;
      e.low = n->low;
      e.track = 0; /* the training thread's row */
      ts_prof_record(tp->p, &e);
      break;
    }
    case TS_HOOK_RUN_END:
      if (tp->timed && tp->d_first) { /* the device's */
        span(tp, "forward", TS_PROF_FORWARD, tp->d_first, tp->d_bwd ? tp->d_bwd : tp->d_last, 0);
        if (tp->d_bwd) span(tp, "backward", TS_PROF_BACKWARD, tp->d_bwd, tp->d_last, 0);
      } else if (!tp->timed && tp->in_bwd) {
        span(tp, "backward", TS_PROF_BACKWARD, tp->t_bwd, now, 0);
      } else if (!tp->timed) {
        span(tp, "forward", TS_PROF_FORWARD, tp->t_run, now, 0);
      }
      break;
  }
}

/* ---- lifetime ---- */
void ts__tprof_free(ts__tprof *tp) {
  if (!tp) return;
  if (tp->plan) ts_plan_remove_hook(tp->plan, hook, tp), ts_plan_set_device_timing(tp->plan, 0);
  if (tp->dist) ts_dist_set_prof(tp->dist, NULL);
  for (int j = 0; tp->ni && j < tp->nnodes; j++) free(tp->ni[j].args);
  free(tp->ni);
  if (tp->owns_p) ts_prof_free(tp->p);
  free(tp);
}

int ts__tprof_attach(ts_prof *p, ts_plan *plan, const ts_graph *g, int world_size, ts__tprof **out) {
  *out = NULL;
  ts__tprof *tp = calloc(1, sizeof *tp);
  if (!tp) return ts_error_set(TS_ENOMEM, "log.profile: out of memory");
  tp->p = p;
  tp->g = g;
  tp->world_size = world_size;
  tp->nnodes = ts_graph_num_nodes(g);
  tp->ni = calloc((size_t)tp->nnodes + 1, sizeof *tp->ni);
  int rc = tp->ni ? TS_OK : ts_error_set(TS_ENOMEM, "log.profile: out of memory");
  for (int j = 0; !rc && j < tp->nnodes; j++) {
    node_info *n = &tp->ni[j];
    n->phase = (uint8_t)(ts_graph_node_is_backward(g, j) != 0);
    n->flops = ts_graph_node_flops(g, j);
    int v = ts_graph_node_num_inputs(g, j) > 0 ? ts_graph_node_input(g, j, 0) : ts_graph_node_output(g, j, 0);
    ts_dtype dt = v >= 0 ? ts_graph_value_dtype(g, v) : TS_F32;
    n->low = (uint8_t)(dt == TS_BF16 || dt == TS_F16); /* computes in 16 bits: against the bf16 peak */
    node_comm(g, j, world_size, n);
    if (ts_prof_get_mode(p) == TS_PROF_TRACE && !(n->args = node_args(g, j)))
      rc = ts_error_set(TS_ENOMEM, "log.profile: out of memory");
  }
  if (!rc && (rc = ts_plan_add_hook(plan, hook, tp)) == TS_OK) tp->plan = plan;
  /* on a GPU the nodes' spans are the device's (CUDA events), recorded from the step the profile
   * starts at (ts__tprof_step_begin): no events before the window */
  if (rc) {
    ts__tprof_free(tp);
    return rc;
  }
  *out = tp;
  return TS_OK;
}

int ts__tprof_create(ts_trainer *t) {
  const ts_config *c = &t->cfg;
  t->prof = NULL;
  if (c->log.profile == TS_PROF_OFF) return TS_OK;
  const ts_dist_run *r = t->run;
  ts_prof_config pc = ts_prof_config_default();
  pc.mode = (ts_prof_mode)c->log.profile;
  ts_prof *p;
  int rc = ts_prof_create(&pc, r->rank, &p);
  if (rc) return ts_error_wrap(rc, "log.profile");
  ts__tprof *tp;
  if ((rc = ts__tprof_attach(p, r->plan, r->g, r->size, &tp))) {
    ts_prof_free(p);
    return rc;
  }
  tp->owns_p = 1;
  tp->start = c->log.profile_start;
  /* the gradient reduction's bytes per step per rank: each parameter over its holders (ring) */
  ts_comm *world = ts_dist_world(t->dist);
  if (world && r->size > 1) {
    double wire = c->parallel.comm_dtype == 0 ? 4 : 2;
    for (int i = 0; i < ts_params_count(r->params); i++) {
      if (ts_params_flags(r->params, i) & TS_PARAM_STATE) continue;
      int h = ts_params_holders(r->params, i, r->size, r->rank);
      ts_shape s = ts_params_shape(r->params, i);
      if (h > 1) tp->reduce_bytes += 2.0 * (h - 1) / h * (double)ts_shape_numel(&s) * wire;
    }
  }
  /* each gradient bucket's collective as a span of its own (issue to completion) */
  tp->dist = t->dist; /* set first: freeing tp turns the recording off again */
  if ((rc = ts_dist_set_prof(t->dist, p))) {
    ts__tprof_free(tp);
    return ts_error_wrap(rc, "log.profile");
  }
  if ((rc = peaks(tp, r->plan))) {
    ts__tprof_free(tp);
    return rc;
  }
  /* time 0 of the trace: every rank's clock read right after one barrier */
  if (world && r->size > 1 && (rc = ts_comm_barrier(world))) {
    ts__tprof_free(tp);
    return ts_error_wrap(rc, "log.profile: aligning clocks");
  }
  ts_prof_set_origin(p, ts_time_now());
  t->prof = tp;
  return TS_OK;
}

/* ---- the trainer's spans ---- */
void ts__tprof_span(ts__tprof *tp, const char *name, int kind, double t0, double t1) {
  if (tp && ts_prof_active(tp->p))
    span(tp, name, kind, t0, t1, kind == TS_PROF_COMM ? (int64_t)tp->reduce_bytes : 0);
}

void ts__tprof_step_begin(ts__tprof *tp, int64_t step, double t) {
  if (!tp) return;
  if (!ts_prof_active(tp->p) && step >= tp->start) {
    ts_prof_set_active(tp->p, 1);
    if (tp->plan) ts_plan_set_device_timing(tp->plan, 1); /* cannot fail on a plan */
  }
  ts_prof_step_begin(tp->p, step, t);
}

void ts__tprof_step_end(ts__tprof *tp, double t, ts_step_info *info) {
  if (!tp || !ts_prof_active(tp->p)) return;
  ts_prof_breakdown b;
  ts_prof_step_end(tp->p, t, &b);
  info->profiled = 1;
  info->data_ms = b.data_ms;
  info->forward_ms = b.forward_ms;
  info->backward_ms = b.backward_ms;
  info->optimizer_ms = b.optimizer_ms;
  info->comm_exposed_ms = b.comm_ms;
}

/* Rank r > 0 sends its trace events to rank 0 (length, then bytes); rank 0 writes the file. */
static int write_trace(ts_trainer *t, ts__tprof *tp, ts_comm *world, int64_t dropped_all) {
  const ts_config *c = &t->cfg;
  int rank = t->run->rank, n = world ? t->run->size : 1;
  char *mine;
  size_t len;
  int rc = ts_prof_trace_events(tp->p, &mine, &len);
  if (rc) return rc;
  if (rank != 0) {
    int64_t l = (int64_t)len;
    rc = ts_comm_send(world, &l, 1, TS_I64, 0, 7101);
    if (!rc && len) rc = ts_comm_send(world, mine, len, TS_U8, 0, 7102);
    free(mine);
    return rc ? ts_error_wrap(rc, "log.trace: sending rank %d's events", rank) : TS_OK;
  }
  char **parts = calloc((size_t)n, sizeof *parts);
  size_t *lens = calloc((size_t)n, sizeof *lens);
  if (!parts || !lens) rc = ts_error_set(TS_ENOMEM, "log.trace: out of memory");
  if (!rc) {
    parts[0] = mine;
    lens[0] = len;
    mine = NULL;
  }
  for (int k = 1; k < n && !rc; k++) { /* every rank's events, in rank order */
    int64_t l = 0;
    rc = ts_comm_recv(world, &l, 1, TS_I64, k, 7101);
    if (!rc && l > 0 && !(parts[k] = malloc((size_t)l))) rc = ts_error_set(TS_ENOMEM, "log.trace: out of memory");
    if (!rc && l > 0) rc = ts_comm_recv(world, parts[k], (size_t)l, TS_U8, k, 7102);
    if (rc) rc = ts_error_wrap(rc, "log.trace: receiving rank %d's events", k);
    else lens[k] = (size_t)l;
  }
  char path[TS_CFG_PATH_MAX + 16];
  if (c->log.trace[0]) snprintf(path, sizeof path, "%s", c->log.trace);
  else snprintf(path, sizeof path, "%s/trace.json", c->checkpoint.dir[0] ? c->checkpoint.dir : ".");
  if (!rc && (rc = ts__mkdir_parents(path))) rc = ts_error_wrap(rc, "log.trace");
  if (!rc) rc = ts_prof_trace_write(path, (const char *const *)parts, lens, n, dropped_all);
  if (!rc) ts__progress_message(&t->prog, "trace: %s (%d rank%s; open in https://ui.perfetto.dev or chrome://tracing)",
                                path, n, n > 1 ? "s" : "");
  for (int k = 0; parts && k < n; k++) free(parts[k]);
  free(parts);
  free(lens);
  free(mine);
  return rc;
}

int ts__tprof_finish(ts_trainer *t) {
  ts__tprof *tp = t->prof;
  if (!tp) return TS_OK;
  const ts_dist_run *r = t->run;
  ts_comm *world = r->size > 1 ? ts_dist_world(t->dist) : NULL;
  ts_prof_breakdown mine;
  ts_prof_mean_breakdown(tp->p, &mine);
  int n = world ? r->size : 1, rc = TS_OK;
  ts_prof_breakdown *all = calloc((size_t)n, sizeof *all);
  if (!all) return ts_error_set(TS_ENOMEM, "log.profile: out of memory");
  all[0] = mine;
  int64_t dropped = ts_prof_dropped(tp->p);
  if (world) { /* every rank's mean step breakdown (a fixed struct, as bytes) */
    rc = ts_comm_allgather(world, &mine, all, sizeof mine, TS_U8);
    if (!rc) rc = ts_comm_allreduce(world, &dropped, &dropped, 1, TS_I64, TS_REDUCE_SUM);
    if (rc) rc = ts_error_wrap(rc, "log.profile: gathering the ranks' step breakdowns");
  }
  if (!rc && r->rank == 0) {
    ts_prof_report_info ri;
    memset(&ri, 0, sizeof ri);
    ri.peak_gflops = tp->peak;
    ri.peak_gflops_low = tp->peak_low;
    ri.peak_what = tp->peak_what;
    ri.arena_bytes = (double)ts_plan_peak_bytes(r->plan);
    ri.naive_bytes = (double)ts_plan_naive_bytes(r->plan);
    ri.nranks = n;
    ri.ranks = all;
    char *text = NULL, *json = NULL;
    rc = ts_prof_report(tp->p, &ri, &text, &json);
    if (!rc) {
      size_t L = strlen(text);
      if (L && text[L - 1] == '\n') text[L - 1] = 0;
      ts__progress_message(&t->prog, "%s", text);
      rc = ts__progress_record(&t->prog, json);
    }
    free(text);
    free(json);
  }
  free(all);
  if (!rc && ts_prof_get_mode(tp->p) == TS_PROF_TRACE) rc = write_trace(t, tp, world, dropped);
  return rc;
}

ts_plan *ts_trainer_plan_handle(ts_trainer *t) { return t->run->plan; }
