/* The predicted step of a layout (ts__autoparallel_predict): one rank of the job built dry through
 * its distribution object (sized, nothing allocated) and priced by the planner's cost model: its
 * training graph per micro-step, its memory, the gradient reduction it sends, its optimizer pass;
 * with pipeline stages also the first and the last stage. The search prices every candidate
 * here, and so does `tessera plan --cluster` (ts_trainer_predict) for the config's layout. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "distribution/compat.h"
#include "autoplan.h"

/* One rank of the job, built dry and priced. */
typedef struct {
  ts_cost_breakdown b;
  ts_dist_memory_info m;
  double red, optimizer_s;
  int64_t M;
  int replicas;
  size_t zR, zS; /* optimizer sharding: replicated and sharded elements (0, 0: not sharded) */
  int nb;        /* its gradient buckets */
  double in_bytes; /* a micro-step's batch on the rank (inputs and labels) */
} priced;

/* Rank `rank` of N built dry under (vt, dc, m) and priced on cluster c into *out. */
static int price_rank(const ts_dist_vt *vt, const ts_dist_config *dc, const ts_dist_model *m, int optim_slots,
                      int64_t batch, int N, int rank, const ts_cluster *c, priced *out) {
  memset(out, 0, sizeof *out);
  ts_dist *d = NULL;
  ts_dist_config dcr = *dc;
  dcr.dry_allocate = 0; /* sized only */
  int rc = ts_dist_create(vt, &dcr, m, N, rank, &d);
  if (!rc && (rc = ts_dist_build(d, m))) rc = ts_error_as_config(rc);
  const ts_dist_run *r = rc ? NULL : ts_dist_get(d);
  /* one micro-batch: every piece the rank runs (a pipeline's virtual stages), each node that runs */
  const ts_plan *pl = NULL;
  const ts_graph *g = NULL;
  for (int i = 0; !rc && (g = ts_dist_train_piece(d, i, &pl)) != NULL; i++) {
    int n = ts_graph_num_nodes(g);
    char *live = malloc((size_t)n + 1);
    if (!live) rc = ts_error_set(TS_ENOMEM, "plan: out of memory");
    for (int j = 0; !rc && j < n; j++) {
      int l = ts_plan_node_live(pl, j);
      if (l < 0) rc = l;
      live[j] = (char)(l > 0);
    }
    ts_cost_breakdown b;
    if (!rc) rc = ts_cost_graph(c, g, TS_F32, live, &b) /* built with the amp pass: priced as it runs */;
    free(live);
    if (rc) break;
    out->b.compute_s += b.compute_s, out->b.gemm_s += b.gemm_s, out->b.other_s += b.other_s;
    out->b.comm_s += b.comm_s, out->b.flops += b.flops, out->b.bytes += b.bytes, out->b.nodes += b.nodes;
  }
  if (!rc) {
    out->M = batch / (r->micro_batch * r->data_parts > 0 ? r->micro_batch * r->data_parts : 1);
    double xs = (double)ts_shape_numel(&m->sample) * (double)ts_dtype_size(m->dtype);
    out->in_bytes = (double)r->micro_batch * (xs + (m->values ? (double)ts_shape_numel(&m->target) * 4
                                                     : m->text ? (double)ts_shape_numel(&m->sample) * 4
                                                               : 4));
    out->replicas = r->data_parts > 1 ? r->data_parts : 1;
    rc = ts_dist_reduce_bytes(d, &out->red);
  }
  if (!rc && ts_dist_optim_sharded(d, &out->zR, &out->zS)) out->nb = ts_dist_grad_buckets(d);
  if (!rc) rc = ts_dist_memory(d, optim_slots, &out->m);
  if (!rc) {
    /* the optimizer: one pass over parameters, gradients and each state slot, read and write */
    out->optimizer_s = 2.0 * (double)(out->m.param_bytes + out->m.optimizer_state_bytes) / c->mem_bandwidth +
                       (double)ts_params_numel(r->params) * 4 / c->mem_bandwidth +
                       (double)ts_params_count(r->params) * c->op_overhead; /* a pass per parameter */
  }
  ts_dist_free(d);
  return rc;
}

int ts__autoparallel_predict(const ts_dist_vt *vt, const ts_dist_config *dc, const ts_dist_model *m, int optim_slots,
                             int64_t batch, int N, int rank, const ts_cluster *c, ts_step_prediction *out) {
  memset(out, 0, sizeof *out);
  int rc = ts_cluster_validate(c, c->name);
  if (rc) return rc;
  /* the rank asked for; with pipeline stages also the first and the last stage's first rank
   * (the embedding, the head and loss, the most activations in flight): the step is set by the
   * slowest piece and the memory by the fullest rank, and every middle stage is a copy of one
   * of them, so three builds price a job of any number of ranks */
  priced pr[3];
  int np = 0, ranks[3] = {rank, -1, -1};
  int P = ts__dist_config_stages(dc);
  int V = P > 1 && dc->virtual_stages > 1 ? dc->virtual_stages : 1;
  int semi = dc->pipeline_semi; /* the operators cut by strategies (semi_auto_parallel) */
  if (P > 1 && N % P == 0) {
    int sub = N / P;
    int first = 0, last = semi ? (P - 1) * sub : P - 1; /* (dp, pp, tp): tp innermost, then pp */
    if (rank != first) ranks[++np] = first;
    if (rank != last) ranks[++np] = last;
  }
  np++;
  for (int i = 0; i < np && !rc; i++) rc = price_rank(vt, dc, m, optim_slots, batch, N, ranks[i], c, &pr[i]);
  if (rc) return rc;
  const priced *a = &pr[0];
  double piece = 0, gemm = 0, other = 0, comm = 0, flops = 0, mem = 0, act = 0;
  int slow = 0;
  for (int i = 0; i < np; i++) {
    double t = pr[i].b.compute_s + pr[i].b.comm_s;
    if (t > piece) piece = t, slow = i;
    flops += pr[i].b.flops / np;
    if ((double)pr[i].m.total_bytes > mem) mem = (double)pr[i].m.total_bytes, act = (double)pr[i].m.activation_bytes;
  }
  gemm = pr[slow].b.gemm_s, other = pr[slow].b.other_s, comm = pr[slow].b.comm_s;
  int64_t M = a->M;
  out->micro_steps = M;
  out->gemm_s = (double)M * gemm;
  out->other_s = (double)M * other;
  out->compute_s = out->gemm_s + out->other_s;
  out->collectives_s = (double)M * comm;
  out->flops = (double)M * flops;
  /* a pipeline's idle time: (P-1) piece-times of warm-up and cool-down over V*M (balanced pieces) */
  if (P > 1) out->bubble_s = (double)(P - 1) / (double)V * piece;
  /* the gradient reduction: the ring all-reduce bytes this rank sends, over the links the
   * replicas span (data parallel's are all the ranks; a pipeline's are P ranks apart) */
  double red = 0, opt = 0;
  for (int i = 0; i < np; i++) {
    red = pr[i].red > red ? pr[i].red : red;
    opt = pr[i].optimizer_s > opt ? pr[i].optimizer_s : opt;
  }
  int replicas = a->replicas;
  int span = ts_cluster_spans(c, replicas, semi ? N / (P * replicas) : P);
  double bw = span ? c->inter_bw : c->intra_bw, lat = span ? c->inter_latency : c->intra_latency;
  out->reduce_s = red > 0 ? red / bw + 2.0 * (replicas - 1) * lat : 0;
  /* plain data parallel over every device of a cluster whose flat all-reduces were measured on
   * this very layout (tessera calibrate across its hosts): the reduction the reducer runs, as
   * measured, bucket by bucket (each its latency): the faster flat variant, in place or from a
   * send buffer, or the hierarchical one where parallel.allreduce says so or auto
   * finds it faster, as ts_grad_reducer chooses */
  int hier = 0;
  if (red > 0 && span && P == 1 && !semi && !dc->optimizer_shard && replicas == N && N > 1 &&
      N == c->nodes * c->devices_per_node && c->nodes > 1 && c->flat_allreduce_bw > 0 && dc->wire == TS_F32) {
    double msg = red / (2.0 * (replicas - 1) / replicas), mb = (dc->bucket_mb > 0 ? dc->bucket_mb : TS_BUCKET_MB_DEFAULT);
    double nb = ceil(msg / (mb * 1024 * 1024)), per = msg / (nb > 0 ? nb : 1);
    int H = c->nodes, L = c->devices_per_node;
    double tf = ts_cluster_allreduce_flat(c, H, L, per), ts = ts_cluster_allreduce_flat_send(c, H, L, per);
    double flat = dc->allreduce == TS_ALLREDUCE_FLAT_SEND ? ts : dc->allreduce == TS_ALLREDUCE_FLAT ? tf : fmin(tf, ts);
    if (!isfinite(flat)) flat = tf; /* flat_send forced without a measurement: priced as in place */
    hier = dc->allreduce == TS_ALLREDUCE_HIER ||
           (dc->allreduce == TS_ALLREDUCE_AUTO && ts_cluster_allreduce_hier(c, H, L, mb * 1024 * 1024) <
                                                     fmin(ts_cluster_allreduce_flat(c, H, L, mb * 1024 * 1024),
                                                          ts_cluster_allreduce_flat_send(c, H, L, mb * 1024 * 1024)));
    out->reduce_s = nb * (hier ? ts_cluster_allreduce_hier(c, H, L, per) : flat);
  }
  /* optimizer sharding (stages 1 and 2, one shard group of every device) on a cluster whose
   * reduce-scatters and all-gathers were measured on this very layout: each bucket reduce-scattered
   * (stage 2: every micro-step) and, after the update, all-gathered by the algorithm the sharding
   * runs (parallel.reduce_scatter; auto: the reduce-scatter measured faster for a bucket of
   * bucket_size_mb), each as measured; the replicated parameters' all-reduce as the flat one. The
   * reduce-scatters hide behind backward, the all-gathers behind the next forward (prefetched). */
  double ag_s = 0;
  int zm = 0;
  if (red > 0 && span && P == 1 && !semi && (dc->optimizer_shard == 1 || dc->optimizer_shard == 2) &&
      dc->shard_group <= 0 && replicas == N && N > 1 && N == c->nodes * c->devices_per_node && c->nodes > 1 &&
      a->zS > 0 && a->nb > 0 && dc->wire == TS_F32) {
    int H = c->nodes, L = c->devices_per_node;
    double mb = (dc->bucket_mb > 0 ? dc->bucket_mb : TS_BUCKET_MB_DEFAULT) * 1048576.0;
    /* mixed precision (parallel.optimizer_shard_weights): the buckets travel in 16 bits */
    double es = (double)ts_dtype_size(ts__zero16_config_dtype(dc, "data_parallel", N, NULL));
    double per = (double)a->zS * es / a->nb;
    double rs[2] = {ts_cluster_reduce_scatter_measured(c, H, L, per, 0), ts_cluster_reduce_scatter_measured(c, H, L, per, 1)};
    double ag[2] = {ts_cluster_allgather_measured(c, H, L, per, 0), ts_cluster_allgather_measured(c, H, L, per, 1)};
    double bm = ts_cluster_reduce_scatter_measured(c, H, L, mb, 0), br = ts_cluster_reduce_scatter_measured(c, H, L, mb, 1);
    int ring = ts__reduce_scatter_ring(dc->reduce_scatter, H, bm, br); /* as the job decides (dist_zero.c) */
    if (isfinite(rs[ring]) && isfinite(ag[ring])) {
      zm = 1;
      double A = dc->optimizer_shard == 2 ? (double)M : 1;
      ag_s = a->nb * ag[ring];
      out->zero_buckets = a->nb, out->zero_ring = ring;
      out->zero_reduce_scatter_s = A * a->nb * rs[ring], out->zero_allgather_s = ag_s;
      out->reduce_s = A * a->nb * rs[ring] + ag_s +
                      (a->zR ? ts_cluster_allreduce_flat(c, H, L, (double)a->zR * sizeof(float)) : 0);
    }
  }
  /* overlapped with the last micro-step's backward (about 2/3 of its compute) when it can be
   * (the hierarchical reduction too: its three steps chained as each completes) */
  double bwd = 2.0 / 3.0 * piece;
  int overlap = dc->overlap && M == 1 && P == 1;
  out->reduce_exposed_s = overlap ? (out->reduce_s > bwd ? out->reduce_s - bwd : 0) : out->reduce_s;
  if (zm && overlap) { /* the all-gathers behind the next forward (about 1/3 of the compute) */
    double rs = out->reduce_s - ag_s, fwd = piece / 3.0;
    out->reduce_exposed_s = (rs > bwd ? rs - bwd : 0) + (ag_s > fwd ? ag_s - fwd : 0);
  }
  out->memory_bytes = (int64_t)mem;
  out->activation_bytes = (int64_t)act;
  out->optimizer_s = opt;
  /* a GPU: the batch of every micro-step copied in before its run (the first stage's, the
   * inputs' rank, under a pipeline: a's) */
  if (c->h2d_bw > 0) out->input_s = (double)M * a->in_bytes / c->h2d_bw;
  out->step_s = out->compute_s + out->collectives_s + out->bubble_s + out->reduce_exposed_s + out->optimizer_s +
                out->input_s;
  out->samples_per_s = out->step_s > 0 ? (double)batch / out->step_s : 0;
  return TS_OK;
}
