/* Bucketed gradient reduction over one communicator (one group of ts_grad_reducer): gradients grouped into buckets (contiguous ranges of the flat
 * gradient buffer, in reverse parameter order, i.e. roughly the order backward produces them),
 * each all-reduced as soon as the last of its gradients has been written, while the rest of
 * backward runs. MPI progresses non-blocking collectives only inside MPI calls, so the executor
 * hook polls every bucket in flight after each node. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "buckets.h"

typedef struct {
  size_t off, len; /* elements of the flat gradient buffer */
  int nparams, nready, pre_ready;
  ts_comm_req *req;
  int started, done;
  uint16_t *wire; /* bf16/f16 copy when compressing */
  size_t *counts; /* reduce-scatter mode: the ranks' parts (elements, in rank order) */
  size_t out_off; /* reduce-scatter mode: where this rank's part goes in `out` */
} bucket;

struct ts__buckets {
  ts_comm *comm;
  ts_dtype wire;
  ts_reduce_op op;
  float *grads;
  bucket *b;
  int nb;
  int *node_start, *node_bucket; /* CSR: node -> buckets whose parameters it completes */
  int nnodes;
  int err;
  char errmsg[512];
  double t_comm_wait;
  int nranks, rank;
  float *out; /* reduce-scatter mode (ts__buckets_scatter): the rank's parts, bucket after bucket */
};

/* The bucket's data as it travels: the gradients themselves, or their 16-bit copy. */
static void *payload(ts__buckets *d, bucket *b) {
  float *g = d->grads + b->off;
  if (d->wire == TS_F32) return g;
  ts_convert(g, TS_F32, b->wire, d->wire, b->len);
  return b->wire;
}

static void finish_bucket(ts__buckets *d, bucket *b) {
  b->done = 1;
  ts_comm_req_free(b->req);
  b->req = NULL;
  if (d->wire != TS_F32) ts_convert(b->wire, d->wire, d->grads + b->off, TS_F32, b->len);
}

static int start_bucket(ts__buckets *d, bucket *b) {
  b->started = 1;
  if (d->out) return ts_comm_ireduce_scatter(d->comm, d->grads + b->off, d->out + b->out_off, b->counts, TS_F32, d->op,
                                             &b->req);
  void *p = payload(d, b);
  return ts_comm_iallreduce(d->comm, p, p, b->len, d->wire, d->op, &b->req);
}

/* A bucket reduced with a blocking all-reduce (after backward, nothing is left to overlap with).
 * ts_comm's blocking calls run on MPI's non-blocking ones under the watchdog; a native blocking
 * path would be faster here (OpenMPI 4.1, 2 MiB, 2 ranks: MPI_Allreduce 0.32 ms, MPI_Iallreduce
 * 0.55 ms) and would come through this one function. */
static int reduce_now(ts__buckets *d, bucket *b) {
  b->started = 1;
  if (d->out) {
    int rc = ts_comm_reduce_scatter(d->comm, d->grads + b->off, d->out + b->out_off, b->counts, TS_F32, d->op);
    if (!rc) finish_bucket(d, b);
    return rc;
  }
  void *p = payload(d, b);
  int rc = ts_comm_allreduce(d->comm, p, p, b->len, d->wire, d->op);
  if (!rc) finish_bucket(d, b);
  return rc;
}

/* node_of[i]: the last node that writes or reads parameter i's gradient (views followed), -1
 * without one. A bucket is reduced in place, so it starts only when nothing reads its gradients
 * any more: a gradient may also be a term of another one (in a + c, c's gradient is summed into
 * a's after it is written), and an all-reduce in flight under that read made the sum depend on
 * timing. */
static int last_touch(const ts_graph *g, ts_params *p, int *node_of) {
  int np = ts_params_count(p), nv = ts_graph_num_values(g), nn = ts_graph_num_nodes(g);
  int *vparam = malloc(sizeof(int) * ((size_t)nv + 1));
  if (!vparam) return TS_ENOMEM;
  for (int v = 0; v < nv; v++) vparam[v] = -1;
  for (int i = 0; i < np; i++) {
    ts_val gv = ts_params_grad_value(p, i);
    int vi = gv == TS_NONE ? -1 : ts_graph_value_index(g, gv);
    node_of[i] = vi < 0 ? -1 : ts_graph_value_producer(g, vi);
    if (vi >= 0) vparam[vi] = i;
  }
  for (int k = 0; k < nn; k++)
    for (int j = 0; j < ts_graph_node_num_inputs(g, k); j++) {
      int v = ts_graph_node_input(g, k, j);
      for (int a; (a = ts_graph_value_alias_of(g, v)) >= 0;) v = a;
      if (vparam[v] >= 0 && node_of[vparam[v]] >= 0 && k > node_of[vparam[v]]) node_of[vparam[v]] = k;
    }
  free(vparam);
  return TS_OK;
}

int ts__buckets_create(ts_comm *comm, ts_params *p, const ts_graph *g, double bucket_mb, int mean,
                  ts_dtype wire, const int *member, ts__buckets **out) {
  ts__buckets *d = calloc(1, sizeof *d);
  if (!d) return ts_error_set(TS_ENOMEM, "data parallel: out of memory");
  d->comm = comm;
  d->wire = wire;
  d->op = mean ? TS_REDUCE_MEAN : TS_REDUCE_SUM;
  size_t cap = (size_t)(bucket_mb * 1024 * 1024 / sizeof(float));
  if (cap < 1) cap = 1;
  int np = ts_params_count(p);
  int *pb = malloc(sizeof(int) * (size_t)(np + 1));
  d->b = calloc((size_t)np + 1, sizeof(bucket));
  d->nnodes = ts_graph_num_nodes(g);
  d->node_start = calloc((size_t)d->nnodes + 2, sizeof(int));
  d->node_bucket = malloc(sizeof(int) * (size_t)(np + 1));
  if (!pb || !d->b || !d->node_start || !d->node_bucket) {
    free(pb);
    ts__buckets_free(d);
    return ts_error_set(TS_ENOMEM, "data parallel: out of memory");
  }
  /* buckets over trainable parameters in reverse registration order; offsets are ascending in
   * registration order, so each bucket is one contiguous range */
  bucket *cur = NULL;
  for (int i = np - 1; i >= 0; i--) {
    pb[i] = -1;
    if (ts_params_flags(p, i) & TS_PARAM_STATE) continue;
    if (member && !member[i]) {
      cur = NULL; /* buckets are contiguous ranges: none spans a parameter left out */
      continue;
    }
    ts_shape s = ts_params_shape(p, i);
    size_t n = (size_t)ts_shape_numel(&s), off = ts_params_offset(p, i);
    if (!cur || cur->len + n > cap) {
      cur = &d->b[d->nb++];
      cur->off = off;
      cur->len = 0;
    }
    cur->off = off; /* walking down: the bucket starts at the lowest offset */
    cur->len += n;
    cur->nparams++;
    pb[i] = (int)(cur - d->b);
  }
  /* node -> buckets completed there (a parameter without gradient is ready from the start) */
  int *cnt = calloc((size_t)d->nnodes + 1, sizeof(int));
  int *node_of = malloc(sizeof(int) * (size_t)(np + 1));
  if (!cnt || !node_of || last_touch(g, p, node_of)) {
    free(cnt);
    free(node_of);
    free(pb);
    ts__buckets_free(d);
    return ts_error_set(TS_ENOMEM, "data parallel: out of memory");
  }
  for (int i = 0; i < np; i++) {
    int nd = node_of[i];
    node_of[i] = -1;
    if (pb[i] < 0) continue;
    if (nd < 0 || nd >= d->nnodes) {
      d->b[pb[i]].pre_ready++;
      continue;
    }
    node_of[i] = nd;
    cnt[nd]++;
  }
  for (int k = 0; k < d->nnodes; k++) d->node_start[k + 1] = d->node_start[k] + cnt[k];
  memset(cnt, 0, sizeof(int) * (size_t)d->nnodes);
  for (int i = 0; i < np; i++)
    if (node_of[i] >= 0) d->node_bucket[d->node_start[node_of[i]] + cnt[node_of[i]]++] = pb[i];
  free(cnt);
  free(node_of);
  free(pb);
  if (wire != TS_F32)
    for (int k = 0; k < d->nb; k++) {
      d->b[k].wire = malloc(sizeof(uint16_t) * (d->b[k].len ? d->b[k].len : 1));
      if (!d->b[k].wire) {
        ts__buckets_free(d);
        return ts_error_set(TS_ENOMEM, "data parallel: out of memory");
      }
    }
  *out = d;
  return TS_OK;
}

void ts__buckets_free(ts__buckets *d) {
  if (!d) return;
  for (int k = 0; k < d->nb; k++) {
    if (d->b[k].req) ts_comm_req_free(d->b[k].req);
    free(d->b[k].wire);
    free(d->b[k].counts);
  }
  free(d->b);
  free(d->node_start);
  free(d->node_bucket);
  free(d);
}

int ts__buckets_num_buckets(const ts__buckets *d) { return d->nb; }

int ts__buckets_scatter(ts__buckets *d, int N, int r, size_t *total) {
  if (d->comm && (N != ts_comm_size(d->comm) || r != ts_comm_rank(d->comm)))
    return ts_error_set(TS_EINVAL, "reduce-scatter buckets: rank %d of %d is not the communicator's", r, N);
  if (d->wire != TS_F32) return ts_error_set(TS_EINVAL, "reduce-scatter buckets: f32 on the wire only");
  d->nranks = N;
  d->rank = r;
  size_t t = 0;
  for (int k = 0; k < d->nb; k++) {
    bucket *b = &d->b[k];
    if (!(b->counts = calloc((size_t)N, sizeof(size_t))))
      return ts_error_set(TS_ENOMEM, "reduce-scatter buckets: out of memory");
    size_t part = (b->len + (size_t)N - 1) / (size_t)N;
    for (int q = 0; q < N; q++) {
      size_t lo = (size_t)q * part;
      b->counts[q] = lo >= b->len ? 0 : b->len - lo < part ? b->len - lo : part;
    }
    b->out_off = t;
    t += b->counts[r];
  }
  *total = t;
  return TS_OK;
}

void ts__buckets_part(const ts__buckets *d, int k, size_t *off, size_t *len, const size_t **counts, size_t *out_off) {
  const bucket *b = &d->b[k];
  *off = b->off;
  *len = b->len;
  *counts = b->counts;
  *out_off = b->out_off;
}

void ts__buckets_set_out(ts__buckets *d, float *out) { d->out = out; }

void ts__buckets_begin(ts__buckets *d, float *grads) {
  d->grads = grads;
  d->err = 0;
  d->t_comm_wait = 0;
  for (int k = 0; k < d->nb; k++) {
    d->b[k].nready = d->b[k].pre_ready;
    d->b[k].started = d->b[k].done = 0;
  }
}

static void poll(ts__buckets *d) {
  for (int k = 0; k < d->nb && !d->err; k++) {
    bucket *b = &d->b[k];
    if (!b->started || b->done) continue;
    int done = 0;
    if (ts_comm_test(b->req, &done)) {
      d->err = TS_ECOMM;
      snprintf(d->errmsg, sizeof d->errmsg, "%s", ts_last_error());
      return;
    }
    if (done) finish_bucket(d, b);
  }
}

void ts__buckets_hook(const ts_hook_info *e, void *user) {
  ts__buckets *d = user;
  int node = e->node;
  if (e->event != TS_HOOK_NODE_END || d->err || node < 0 || node >= d->nnodes) return;
  for (int j = d->node_start[node]; j < d->node_start[node + 1]; j++) {
    bucket *b = &d->b[d->node_bucket[j]];
    if (++b->nready == b->nparams && !b->started && start_bucket(d, b)) {
      d->err = TS_ECOMM;
      snprintf(d->errmsg, sizeof d->errmsg, "%s", ts_last_error());
      return;
    }
  }
  poll(d);
}

int ts__buckets_finish(ts__buckets *d) {
  double t0 = ts_time_now();
  int rc = d->err;
  if (rc) return ts_error_set(rc, "%s", d->errmsg);
  /* first the buckets in flight, then those never started (gradients not produced this run, or
   * overlap off), blocking, in bucket order, which is the same on every rank */
  for (int k = 0; k < d->nb && !rc; k++) {
    bucket *b = &d->b[k];
    if (!b->started || b->done) continue;
    rc = ts_comm_wait(b->req);
    if (!rc) finish_bucket(d, b);
  }
  for (int k = 0; k < d->nb && !rc; k++)
    if (!d->b[k].started) rc = reduce_now(d, &d->b[k]);
  d->t_comm_wait = ts_time_now() - t0;
  return rc;
}

double ts__buckets_wait_seconds(const ts__buckets *d) { return d->t_comm_wait; }
