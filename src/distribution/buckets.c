/* Bucketed gradient reduction over one communicator (one group of ts_grad_reducer): gradients grouped into buckets (contiguous ranges of the flat
 * gradient buffer, in reverse parameter order, i.e. roughly the order backward produces them),
 * each all-reduced as soon as the last of its gradients has been written, while the rest of
 * backward runs. MPI progresses non-blocking collectives only inside MPI calls, so the executor
 * hook polls every bucket in flight after each node.
 *
 * Staged mode (ts__buckets_stage; optimizer sharding stages 2 and 3): there is no whole flat
 * gradient buffer. Each bucket's gradients are written by backward straight into a staging slot
 * (the plan binds every gradient value to its place in its bucket's slot, ts__buckets_grad_addr),
 * and the bucket is reduce-scattered from there into the rank's part. The slots are assigned
 * once, from the graph: a bucket occupies its slot from the first node writing one of its
 * gradients to the end of its reduce-scatter, which starts after the last node touching them; a
 * bucket takes the slot whose occupant was last touched longest before its first writer (a new
 * slot only when every slot's occupant is still being written then, or fewer than two exist), so
 * backward in reverse layer order uses two, one reduce-scattered while the other is written.
 * Before the first writer of a bucket runs, the hook waits for the reduce-scatter of the slot's
 * previous bucket.
 *
 * The buckets at the end of backward: those completed by the last node that completes a bucket
 * (the first layer's gradients), when less than TAIL_FLOPS of the step's FLOPs follow it, have
 * nothing left to overlap with. On a native communicator (ts_comm_set_blocking) the hook leaves
 * them to ts__buckets_finish, which runs after backward and reduces them with MPI's blocking call
 * (1.2x to 3x faster than the non-blocking one polled to completion, bench_allreduce); on a
 * polled one they start at once as before. Buckets completed a few nodes earlier are not in the
 * tail even when those nodes have no FLOPs to speak of: the GPT's embedding and layer-norm
 * backward nodes are memory-bound work to overlap with. (A first rule left every bucket completed
 * in the last 1% of the FLOPs to the end, the GPT's last three: its exposed wait after backward
 * was then 11.6 ms against 8.1 ms polled, medians of 3 rounds of bench_dp.) Which buckets these
 * are follows from the graph alone, so every rank issues the same calls. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "buckets.h"
#include "graph/graph_ir.h"
#include "tessera/prof.h"

#define STAGE_SLOTS 2 /* staging slots at least (when there are as many buckets) */
#define TAIL_FLOPS 0.01 /* the last bucket(s) wait for finish when less than this share of the FLOPs follows */
#define WIRE_SLOTS TS__BUCKET_WIRE_SLOTS

typedef struct {
  size_t off, len; /* elements of the flat gradient buffer */
  int nparams, nready, pre_ready;
  ts_comm_req *req;
  ts_comm_hier_req *hreq; /* hierarchical mode: its non-blocking hierarchical all-reduce */
  ts_comm_ring_req *rreq; /* ring mode: its ring reduce-scatter */
  int started, done;
  uint16_t *wire; /* bf16/f16 copy when compressing */
  size_t *counts; /* reduce-scatter mode: the ranks' parts (elements, in rank order) */
  size_t out_off; /* reduce-scatter mode: where this rank's part goes in `out` */
  size_t lo;      /* reduce-scatter mode: this rank's part's offset in the bucket */
  int first, last; /* the first node writing one of its gradients, the last touching one (nnodes: none) */
  int slot;        /* staged mode: its staging slot */
  int send;        /* all-reduce mode: from a separate send buffer (ts__buckets_set_send); -1 while not
                      in flight, else the send slot it holds */
  int use_send;
  int tail;        /* completed when less than TAIL_FLOPS of the step's FLOPs remain */
  /* profiling (ts__buckets_set_prof): its span's name, args by how its completion was observed
   * (OBS_*), track, and when it was issued */
  char *pname, *pargs[3];
  int track;
  double t_issue;
} bucket;

/* How a bucket's completion was observed: a ts_comm_test after a node (the end of its span is
 * within a node of the real completion), a wait, or a blocking call (the span is the call). */
enum { OBS_TEST, OBS_WAIT, OBS_BLOCKING };

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
  double t_claim; /* staged mode: seconds first writers waited for their slot (ts__buckets_take_claim_wait) */
  int nranks, rank;
  float *out; /* reduce-scatter mode (ts__buckets_scatter): the rank's parts, bucket after bucket;
                 NULL: in place, each at its own place in the gradients */
  /* staged mode (ts__buckets_stage) */
  int staged, blocking, accumulate;
  ts_comm_topo *hier; /* hierarchical mode: buckets all-reduced hierarchically over this topology */
  ts_comm *ring;      /* ring mode (ts__buckets_set_ring): reduce-scattered around the ranks of this
                         communicator (a dup of comm: the rings' tags are the bucket numbers) */
  int nslots;
  float **slot, **slot_out;   /* per slot: the staging buffer; with accumulation its reduced part */
  size_t *slot_len, *slot_part;
  int *slot_owner;            /* per slot: the bucket in it this run (-1: none yet) */
  int *first_start, *first_bucket; /* CSR: node -> buckets whose first writer it is, in slot order */
  size_t *hole_off, *hole_len; /* parameters of a bucket that get no gradient: zeros in its slot */
  int *hole_bucket, nholes;
  int defer_tail; /* this run: the tail buckets wait for finish (the communicator is native) */
  float *sslot[2]; /* all-reduce mode, ts__buckets_set_send: the send slots (each the largest such bucket) */
  uint16_t *wslot[WIRE_SLOTS]; /* reduce-scatter mode with a 16-bit wire (ts__buckets_set_wire_slots): each
                                  bucket rounded into one and reduce-scattered there in place (each the
                                  largest bucket) */
  int nclaim;      /* the send (2) or wire (WIRE_SLOTS) slots a bucket claims one of */
  int sowner[WIRE_SLOTS]; /* the bucket holding each send or wire slot (-1: free) */
  size_t wire_numel; /* the wire slots' elements (all of them) */
  size_t send_numel;
  int low;         /* ts__buckets_set_low: the gradients are 16-bit (the wire's dtype) where backward writes them */
  uint16_t *g16;   /* low, not staged: the whole 16-bit gradient buffer (the store's flat layout) */
  uint16_t *out16; /* low: where the rank's reduced parts go (NULL: in place, at their own places) */
  ts_prof *prof;  /* each bucket's collective recorded as a span (NULL: nothing, no clock read) */
};

/* The bucket's data as it travels: the gradients themselves, or their 16-bit copy. */
static void *payload(ts__buckets *d, bucket *b) {
  float *g = d->grads + b->off;
  if (d->wire == TS_F32) return g;
  ts_convert(g, TS_F32, b->wire, d->wire, b->len);
  return b->wire;
}

/* The bucket's collective as a span from its issue to now (profiling on only). */
static void record(ts__buckets *d, bucket *b, int how) {
  if (!ts_prof_active(d->prof)) return;
  ts_prof_event e;
  memset(&e, 0, sizeof e);
  e.name = b->pname;
  e.cat = d->nranks ? "reduce_scatter" : "allreduce";
  e.args = b->pargs[how];
  e.t0 = b->t_issue;
  e.t1 = ts_time_now();
  e.bytes = (int64_t)(b->len * ts_dtype_size(d->wire));
  e.group = d->comm ? ts_comm_size(d->comm) : 0;
  e.kind = TS_PROF_COLLECTIVE;
  e.coll = 1;
  e.track = (uint16_t)b->track;
  ts_prof_record(d->prof, &e);
}

static float *rs_dst(ts__buckets *d, bucket *b);

static void finish_bucket(ts__buckets *d, bucket *b, int how) {
  if (d->prof) record(d, b, how);
  b->done = 1;
  ts_comm_req_free(b->req);
  b->req = NULL;
  ts_comm_hier_req_free(b->hreq);
  b->hreq = NULL;
  ts_comm_ring_req_free(b->rreq);
  b->rreq = NULL;
  if (d->nranks && d->wire != TS_F32 && b->send >= 0) /* the rank's 16-bit part widened where it goes */
    ts_convert(d->wslot[b->send] + b->lo, d->wire, rs_dst(d, b), TS_F32, b->counts[d->rank]);
  if (b->use_send && b->send >= 0) { /* its send or wire slot free again */
    d->sowner[b->send] = -1;
    b->send = -1;
  }
  if (!d->nranks && d->wire != TS_F32) ts_convert(b->wire, d->wire, d->grads + b->off, TS_F32, b->len);
  if (d->staged && d->accumulate) { /* a later micro-step: its reduced part added to the rank's */
    float *dst = d->out + b->out_off;
    const float *src = d->slot_out[b->slot];
    for (size_t i = 0; i < b->counts[d->rank]; i++) dst[i] += src[i];
  }
}

/* Where a reduce-scatter of b reads the gradients and writes the rank's part. */
static const float *rs_src(ts__buckets *d, bucket *b) {
  if (!d->staged && d->out) return d->grads + b->off;
  /* a slot, or the gradients reduced in place (whose other parts the last step's reduction left
   * undefined): parameters without a gradient are zeros, as in a fresh buffer */
  float *s = d->staged ? d->slot[b->slot] : d->grads + b->off;
  for (int h = 0; h < d->nholes; h++)
    if (d->hole_bucket[h] == (int)(b - d->b)) memset(s + (d->hole_off[h] - b->off), 0, d->hole_len[h] * sizeof(float));
  return s;
}
static float *rs_dst(ts__buckets *d, bucket *b) {
  if (d->staged && d->accumulate) return d->slot_out[b->slot];
  return d->out ? d->out + b->out_off : d->grads + b->off + b->lo; /* in place: at the part's own place */
}

static int reduce_now(ts__buckets *d, bucket *b);

static int bucket_wait(bucket *b);

/* A slot for bucket b's outgoing data: a free one, else the one whose bucket was issued first,
 * once its collective completes. */
static int claim_slot(ts__buckets *d, bucket *b) {
  int s = -1, ns = d->nclaim > 0 ? d->nclaim : 2;
  for (int k = 0; k < ns && s < 0; k++)
    if (d->sowner[k] < 0) s = k;
  if (s < 0) { /* all taken: the one issued first, once its collective completes */
    s = 0;
    for (int k = 1; k < ns; k++)
      if (d->b[d->sowner[k]].t_issue < d->b[d->sowner[s]].t_issue) s = k;
    bucket *o = &d->b[d->sowner[s]];
    double t0 = ts_time_now();
    if (!o->done) {
      int rc = bucket_wait(o);
      if (rc) return rc;
      finish_bucket(d, o, OBS_WAIT);
    }
    d->t_comm_wait += ts_time_now() - t0;
  }
  d->sowner[s] = (int)(b - d->b);
  b->send = s;
  return TS_OK;
}

/* All-reduce from a separate send buffer: a send slot, the gradients copied in. */
static int claim_send(ts__buckets *d, bucket *b) {
  int rc = claim_slot(d, b);
  if (!rc) memcpy(d->sslot[b->send], d->grads + b->off, b->len * sizeof(float));
  return rc;
}

/* A 16-bit reduce-scatter (parallel.comm_dtype): a wire slot, the bucket's gradients rounded in;
 * the reduce-scatter runs there in place and finish_bucket widens the rank's part to where it goes. */
static int claim_wire(ts__buckets *d, bucket *b) {
  int rc = claim_slot(d, b);
  if (!rc) rc = ts_convert(rs_src(d, b), TS_F32, d->wslot[b->send], d->wire, b->len);
  return rc;
}

/* Tests / waits for b's collective, whichever kind it is. */
static int bucket_test(bucket *b, int *done) {
  return b->hreq ? ts_comm_hier_test(b->hreq, done) : b->rreq ? ts_comm_ring_test(b->rreq, done) : ts_comm_test(b->req, done);
}
static int bucket_wait(bucket *b) {
  return b->hreq ? ts_comm_hier_wait(b->hreq) : b->rreq ? ts_comm_ring_wait(b->rreq) : ts_comm_wait(b->req);
}

/* Where b's reduce-scatter reads and writes: the f32 gradients and the rank's part (rs_src,
 * rs_dst), or with a 16-bit wire its wire slot in place (claimed and filled here). */
static int rs_bufs(ts__buckets *d, bucket *b, const void **src, void **dst) {
  if (d->low) { /* 16-bit gradients reduce-scattered where backward wrote them (holes: zeros) */
    uint16_t *s16 = d->staged ? (uint16_t *)d->slot[b->slot] : d->g16 + b->off;
    for (int h = 0; h < d->nholes; h++)
      if (d->hole_bucket[h] == (int)(b - d->b)) memset(s16 + (d->hole_off[h] - b->off), 0, d->hole_len[h] * sizeof *s16);
    *src = s16, *dst = d->out16 ? d->out16 + b->out_off : s16 + b->lo;
    return TS_OK;
  }
  if (d->wire == TS_F32) {
    *src = rs_src(d, b), *dst = rs_dst(d, b);
    return TS_OK;
  }
  int rc = claim_wire(d, b);
  if (rc) return rc;
  *src = d->wslot[b->send], *dst = d->wslot[b->send] + b->lo;
  return TS_OK;
}

/* b reduce-scattered by the ring (the bucket's number its tag: one ring per bucket in flight). */
static int start_ring(ts__buckets *d, bucket *b) {
  const void *src;
  void *dst;
  int rc = rs_bufs(d, b, &src, &dst);
  return rc ? rc : ts_comm_ireduce_scatter_ring(d->ring, src, dst, b->counts, d->wire, d->op, (int)(b - d->b), &b->rreq);
}

static int start_bucket(ts__buckets *d, bucket *b) {
  if (d->blocking) return reduce_now(d, b);
  b->started = 1;
  b->t_issue = ts_time_now();
  if (d->hier) return ts_comm_iallreduce_hier(d->hier, d->grads + b->off, b->len, TS_F32, d->op, &b->hreq);
  if (d->nranks && d->ring) return start_ring(d, b);
  if (d->nranks) {
    const void *src;
    void *dst;
    int rc = rs_bufs(d, b, &src, &dst);
    return rc ? rc : ts_comm_ireduce_scatter(d->comm, src, dst, b->counts, d->wire, d->op, &b->req);
  }
  if (b->use_send) { /* OpenMPI picks ring / Rabenseifner only out of place */
    int rc = claim_send(d, b);
    return rc ? rc : ts_comm_iallreduce(d->comm, d->sslot[b->send], d->grads + b->off, b->len, TS_F32, d->op, &b->req);
  }
  void *p = payload(d, b);
  return ts_comm_iallreduce(d->comm, p, p, b->len, d->wire, d->op, &b->req);
}

/* A bucket reduced with a blocking call (after backward, nothing is left to overlap with; or
 * blocking staged mode): MPI's blocking collective under the watchdog on a native communicator,
 * the non-blocking one polled to completion on a polled one (ts_comm_set_blocking). */
static int reduce_now(ts__buckets *d, bucket *b) {
  b->started = 1;
  if (d->prof) b->t_issue = ts_time_now();
  if (d->nranks) {
    const void *src;
    void *dst;
    int rc = d->ring ? start_ring(d, b) : rs_bufs(d, b, &src, &dst);
    if (!rc && !d->ring) rc = ts_comm_reduce_scatter(d->comm, src, dst, b->counts, d->wire, d->op);
    if (!rc && b->rreq) rc = ts_comm_ring_wait(b->rreq);
    if (!rc) finish_bucket(d, b, OBS_BLOCKING);
    return rc;
  }
  if (b->use_send && !d->hier) {
    int rc = claim_send(d, b);
    if (!rc) rc = ts_comm_allreduce(d->comm, d->sslot[b->send], d->grads + b->off, b->len, TS_F32, d->op);
    if (!rc) finish_bucket(d, b, OBS_BLOCKING);
    return rc;
  }
  void *p = payload(d, b);
  int rc = d->hier ? ts_comm_allreduce_hier(d->hier, p, b->len, d->wire, d->op)
                   : ts_comm_allreduce(d->comm, p, p, b->len, d->wire, d->op);
  if (!rc) finish_bucket(d, b, OBS_BLOCKING);
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
  return ts__buckets_create_split(comm, p, g, bucket_mb, mean, wire, member, NULL, 0, out);
}

int ts__buckets_create_split(ts_comm *comm, ts_params *p, const ts_graph *g, double bucket_mb, int mean,
                             ts_dtype wire, const int *member, const int *splits, int nsplits, ts__buckets **out) {
  int ntrain = 0;
  for (int i = 0; i < ts_params_count(p); i++) ntrain += !(ts_params_flags(p, i) & TS_PARAM_STATE);
  for (int k = 0; k < nsplits; k++)
    if (splits[k] <= 0 || splits[k] >= ntrain || (k && splits[k] <= splits[k - 1]))
      return ts_error_set(TS_ECONFIG,
                          "parallel.all_reduce_fusion_config[%d] = %d: split points must increase and lie in 1..%d "
                          "(the model has %d gradients, indexed in registration order)",
                          k, splits[k], ntrain - 1, ntrain);
  ts__buckets *d = calloc(1, sizeof *d);
  if (!d) return ts_error_set(TS_ENOMEM, "data parallel: out of memory");
  d->comm = comm;
  d->wire = wire;
  d->op = mean ? TS_REDUCE_MEAN : TS_REDUCE_SUM;
  size_t cap = (size_t)(bucket_mb * 1024 * 1024 / sizeof(float));
  if (cap < 1) cap = 1;
  if (nsplits > 0) cap = SIZE_MAX; /* the split points alone cut the buckets */
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
  int ti = ntrain, span = nsplits; /* trainable index of i, and the span between splits it is in */
  for (int i = np - 1; i >= 0; i--) {
    pb[i] = -1;
    if (ts_params_flags(p, i) & TS_PARAM_STATE) continue;
    ti--;
    if (span > 0 && ti < splits[span - 1]) { /* crossed a split point: a new bucket */
      while (span > 0 && ti < splits[span - 1]) span--;
      cur = NULL;
    }
    if (member && !member[i]) {
      cur = NULL; /* buckets are contiguous ranges: none spans a parameter left out */
      continue;
    }
    ts_shape s = ts_params_shape(p, i);
    size_t n = (size_t)ts_shape_numel(&s), off = ts_params_offset(p, i);
    int solo = member && member[i] == 2; /* a bucket of its own */
    if (!cur || solo || cur->len + n > cap) {
      cur = &d->b[d->nb++];
      cur->off = off;
      cur->len = 0;
    }
    cur->off = off; /* walking down: the bucket starts at the lowest offset */
    cur->len += n;
    cur->nparams++;
    pb[i] = (int)(cur - d->b);
    if (solo) cur = NULL;
  }
  /* node -> buckets completed there (a parameter without gradient is ready from the start) */
  int *cnt = calloc((size_t)d->nnodes + 1, sizeof(int));
  int *node_of = malloc(sizeof(int) * (size_t)(np + 1));
  d->hole_off = malloc(sizeof(size_t) * (size_t)(np + 1));
  d->hole_len = malloc(sizeof(size_t) * (size_t)(np + 1));
  d->hole_bucket = malloc(sizeof(int) * (size_t)(np + 1));
  if (!cnt || !node_of || !d->hole_off || !d->hole_len || !d->hole_bucket || last_touch(g, p, node_of)) {
    free(cnt);
    free(node_of);
    free(pb);
    ts__buckets_free(d);
    return ts_error_set(TS_ENOMEM, "data parallel: out of memory");
  }
  for (int k = 0; k < d->nb; k++) {
    d->b[k].first = d->b[k].last = d->nnodes;
    d->b[k].slot = -1;
  }
  for (int i = 0; i < np; i++) {
    int nd = node_of[i];
    node_of[i] = -1;
    if (pb[i] < 0) continue;
    bucket *b = &d->b[pb[i]];
    if (nd < 0 || nd >= d->nnodes) {
      b->pre_ready++;
      ts_shape sh = ts_params_shape(p, i);
      d->hole_off[d->nholes] = ts_params_offset(p, i);
      d->hole_len[d->nholes] = (size_t)ts_shape_numel(&sh);
      d->hole_bucket[d->nholes++] = pb[i];
      continue;
    }
    /* the span a staging slot holds the bucket: from its first writer to its last touch */
    ts_val gv = ts_params_grad_value(p, i);
    /* the slot is written from the first of: the producer of the gradient or of the value it is a
     * view of, and where that producer is a CAST, the producer of its input (the runtime's
     * matmul+cast fusion: under amp a weight's bf16 gradient matmul writes the f32 gradient in
     * the slot itself, before the cast node runs) */
    for (int v = ts_graph_value_index(g, gv); v >= 0; v = ts_graph_value_alias_of(g, v)) {
      int pr = ts_graph_value_producer(g, v);
      if (pr >= 0 && pr < b->first) b->first = pr;
      if (pr >= 0 && ts_graph_node_op(g, pr) == TS_OP_CAST && ts_graph_node_num_inputs(g, pr) == 1) {
        int ip = ts_graph_value_producer(g, ts_graph_node_input(g, pr, 0));
        if (ip >= 0 && ip < b->first) b->first = ip;
      }
    }
    if (b->last == d->nnodes || nd > b->last) b->last = nd;
    node_of[i] = nd;
    cnt[nd]++;
  }
  for (int k = 0; k < d->nnodes; k++) d->node_start[k + 1] = d->node_start[k] + cnt[k];
  /* the tail: the buckets completed by the last node that completes one (b->last: where its last
   * gradient is written or last read), if less than TAIL_FLOPS of the step's FLOPs follow it */
  double total = 0, after = 0;
  int lastc = -1;
  for (int k = 0; k < d->nnodes; k++) total += ts_graph_node_flops(g, k);
  for (int j = 0; j < d->nb; j++)
    if (d->b[j].last < d->nnodes && d->b[j].last > lastc) lastc = d->b[j].last;
  for (int k = d->nnodes - 1; k > lastc; k--) after += ts_graph_node_flops(g, k);
  for (int j = 0; lastc >= 0 && j < d->nb; j++) d->b[j].tail = d->b[j].last == lastc && after < TAIL_FLOPS * total;
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
    ts_comm_hier_req_free(d->b[k].hreq);
    ts_comm_ring_req_free(d->b[k].rreq);
    free(d->b[k].wire);
    free(d->b[k].counts);
    free(d->b[k].pname);
    for (int h = 0; h < 3; h++) free(d->b[k].pargs[h]);
  }
  ts_free(d->sslot[0]);
  ts_free(d->sslot[1]);
  for (int k = 0; k < WIRE_SLOTS; k++) ts_free(d->wslot[k]);
  for (int k = 0; k < d->nslots; k++) {
    if (d->slot) ts_free(d->slot[k]);
    if (d->slot_out) ts_free(d->slot_out[k]);
  }
  free(d->slot);
  free(d->slot_out);
  free(d->slot_len);
  free(d->slot_part);
  free(d->slot_owner);
  free(d->first_start);
  free(d->first_bucket);
  free(d->hole_off);
  free(d->hole_len);
  free(d->hole_bucket);
  free(d->b);
  free(d->node_start);
  free(d->node_bucket);
  free(d);
}

int ts__buckets_num_buckets(const ts__buckets *d) { return d->nb; }

int ts__buckets_set_prof(ts__buckets *d, ts_prof *p, int first, int track) {
  static const char *const obs[3] = {"test", "wait", "blocking"};
  d->prof = NULL;
  if (!p || !d->comm) return TS_OK;
  const char *kind = d->nranks ? "reduce_scatter" : "allreduce";
  for (int k = 0; k < d->nb; k++) {
    bucket *b = &d->b[k];
    char nm[64], a[320];
    b->track = track + k < 65536 ? track + k : 0;
    if (!b->pname) {
      snprintf(nm, sizeof nm, "%s bucket %d", kind, first + k);
      if (!(b->pname = strdup(nm))) return ts_error_set(TS_ENOMEM, "log.profile: out of memory");
    }
    for (int h = 0; h < 3; h++) {
      if (b->pargs[h]) continue;
      /* the call issued: non-blocking (completion seen by a test or a wait) or blocking */
      const char *call = h == OBS_BLOCKING ? (d->hier ? "allreduce_hier" : d->nranks ? "reduce_scatter" : "allreduce")
                                           : (d->hier ? "iallreduce_hier" : d->nranks ? "ireduce_scatter" : "iallreduce");
      snprintf(a, sizeof a,
               "\"bucket\":%d,\"params\":%d,\"elements\":%zu,\"dtype\":\"%s\",\"ranks\":%d,\"call\":\"%s\"%s,"
               "\"observed_at\":\"%s\"",
               first + k, b->nparams, b->len, ts_dtype_name(d->wire), ts_comm_size(d->comm), call,
               d->hier ? ",\"algorithm\":\"hierarchical\"" : d->ring && d->nranks ? ",\"algorithm\":\"ring\"" : "", obs[h]);
      if (!(b->pargs[h] = strdup(a))) return ts_error_set(TS_ENOMEM, "log.profile: out of memory");
    }
  }
  d->prof = p;
  return TS_OK;
}

int ts__buckets_scatter(ts__buckets *d, int N, int r, size_t *total) {
  if (d->comm && (N != ts_comm_size(d->comm) || r != ts_comm_rank(d->comm)))
    return ts_error_set(TS_EINVAL, "reduce-scatter buckets: rank %d of %d is not the communicator's", r, N);
  d->nranks = N;
  for (int k = 0; k < d->nb; k++) { /* a 16-bit wire: WIRE_SLOTS wire slots (ts__buckets_set_wire_slots), no copy a bucket */
    free(d->b[k].wire);
    d->b[k].wire = NULL;
    d->b[k].use_send = d->wire != TS_F32;
    d->b[k].send = -1;
  }
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
    b->lo = 0;
    for (int q = 0; q < r; q++) b->lo += b->counts[q];
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

int ts__buckets_set_wire_slots(ts__buckets *d, int sizing, size_t *numel) {
  *numel = 0;
  if (!d->nranks || d->wire == TS_F32 || d->low) return TS_OK;
  size_t big = 0;
  for (int k = 0; k < d->nb; k++) big = d->b[k].len > big ? d->b[k].len : big;
  d->nclaim = WIRE_SLOTS;
  for (int s = 0; s < WIRE_SLOTS; s++) {
    ts_free(d->wslot[s]);
    d->wslot[s] = NULL;
    d->sowner[s] = -1;
    if (big && !sizing && !(d->wslot[s] = ts_alloc(big * sizeof(uint16_t))))
      return ts_error_set(TS_ENOMEM, "gradient buckets: cannot allocate a %s wire slot of %zu elements",
                          ts_dtype_name(d->wire), big);
  }
  d->wire_numel = WIRE_SLOTS * big;
  *numel = d->wire_numel;
  return TS_OK;
}

static int by_first(const void *a, const void *b) {
  const bucket *x = *(bucket *const *)a, *y = *(bucket *const *)b;
  return x->first != y->first ? (x->first > y->first) - (x->first < y->first) : (x > y) - (x < y);
}

int ts__buckets_stage(ts__buckets *d, int accumulate, int sizing, size_t *numel) {
  *numel = 0;
  if (!d->nranks) return ts_error_set(TS_EINVAL, "staged gradient buckets: reduce-scatter mode only (ts__buckets_scatter)");
  if (d->staged) return ts_error_set(TS_EINVAL, "staged gradient buckets: already staged");
  if (d->low && accumulate)
    return ts_error_set(TS_EINVAL, "staged gradient buckets: 16-bit gradients are not accumulated over micro-steps");
  bucket **ord = malloc(sizeof *ord * ((size_t)d->nb + 1));
  int *slast = malloc(sizeof(int) * ((size_t)d->nb + 1));
  d->slot_len = calloc((size_t)d->nb + 1, sizeof(size_t));
  d->slot_part = calloc((size_t)d->nb + 1, sizeof(size_t));
  d->slot_owner = malloc(sizeof(int) * ((size_t)d->nb + 1));
  d->first_start = calloc((size_t)d->nnodes + 2, sizeof(int));
  d->first_bucket = malloc(sizeof(int) * ((size_t)d->nb + 1));
  if (!ord || !slast || !d->slot_len || !d->slot_part || !d->slot_owner || !d->first_start || !d->first_bucket) {
    free(ord);
    free(slast);
    return ts_error_set(TS_ENOMEM, "staged gradient buckets: out of memory");
  }
  for (int k = 0; k < d->nb; k++) ord[k] = &d->b[k];
  qsort(ord, (size_t)d->nb, sizeof *ord, by_first);
  /* each bucket, by its first writer, into the slot whose occupant was last touched longest
   * before it (its reduce-scatter has had the most time); a new slot if none is free by then,
   * and at least STAGE_SLOTS, so that a bucket's reduce-scatter runs while the next one's
   * gradients are computed instead of holding up its first writer */
  for (int k = 0; k < d->nb; k++) {
    bucket *b = ord[k];
    int best = -1;
    for (int q = 0; q < d->nslots; q++)
      if (slast[q] < b->first && (best < 0 || slast[q] < slast[best])) best = q;
    if (best < 0 || d->nslots < STAGE_SLOTS) best = d->nslots++;
    b->slot = best;
    slast[best] = b->last;
    if (b->len > d->slot_len[best]) d->slot_len[best] = b->len;
    if (b->counts[d->rank] > d->slot_part[best]) d->slot_part[best] = b->counts[d->rank];
    if (b->first < d->nnodes) d->first_start[b->first + 1]++;
  }
  for (int n = 0; n < d->nnodes; n++) d->first_start[n + 1] += d->first_start[n];
  int *fill = calloc((size_t)d->nnodes + 1, sizeof(int));
  if (!fill) {
    free(ord);
    free(slast);
    return ts_error_set(TS_ENOMEM, "staged gradient buckets: out of memory");
  }
  for (int k = 0; k < d->nb; k++) /* in slot-assignment order: a node waits for them in that order */
    if (ord[k]->first < d->nnodes)
      d->first_bucket[d->first_start[ord[k]->first] + fill[ord[k]->first]++] = (int)(ord[k] - d->b);
  free(fill);
  free(ord);
  free(slast);
  d->slot = calloc((size_t)d->nslots + 1, sizeof(float *));
  d->slot_out = accumulate ? calloc((size_t)d->nslots + 1, sizeof(float *)) : NULL;
  if (!d->slot || (accumulate && !d->slot_out)) return ts_error_set(TS_ENOMEM, "staged gradient buckets: out of memory");
  d->staged = 1;
  for (int q = 0; q < d->nslots; q++) {
    void *(*alloc)(size_t) = sizing ? ts_alloc : ts_calloc;
    d->slot[q] = alloc((d->slot_len[q] ? d->slot_len[q] : 1) * (d->low ? sizeof(uint16_t) : sizeof(float)));
    if (accumulate) d->slot_out[q] = alloc((d->slot_part[q] ? d->slot_part[q] : 1) * sizeof(float));
    if (!d->slot[q] || (accumulate && !d->slot_out[q]))
      return ts_error_set(TS_ENOMEM, "staged gradient buckets: cannot allocate a staging slot of %zu floats",
                          d->slot_len[q]);
    *numel += d->slot_len[q] + (accumulate ? d->slot_part[q] : 0);
  }
  return TS_OK;
}

int ts__buckets_num_slots(const ts__buckets *d) { return d->staged ? d->nslots : 0; }

int ts__buckets_slot_of(const ts__buckets *d, int k, int *last) {
  *last = k >= 0 && k < d->nb ? d->b[k].last : d->nnodes;
  return d->staged && k >= 0 && k < d->nb ? d->b[k].slot : -1;
}

float *ts__buckets_slot_data(const ts__buckets *d, int q, size_t *numel) {
  *numel = d->staged && q >= 0 && q < d->nslots ? d->slot_len[q] : 0;
  return *numel ? d->slot[q] : NULL;
}

int ts__buckets_hole(const ts__buckets *d, int h, int *k, size_t *off, size_t *len) {
  if (h < 0 || h >= d->nholes) return 0;
  *k = d->hole_bucket[h], *off = d->hole_off[h], *len = d->hole_len[h];
  return 1;
}

int ts__buckets_set_low(ts__buckets *d, uint16_t *grads16, uint16_t *out16) {
  if (!d->nranks || (d->wire != TS_BF16 && d->wire != TS_F16) || d->staged || d->wire_numel)
    return ts_error_set(TS_EINVAL, "gradient buckets: 16-bit gradients need reduce-scatter mode with a bf16/f16 dtype, "
                        "before staging or wire slots");
  d->low = 1;
  d->g16 = grads16;
  d->out16 = out16;
  return TS_OK;
}

void *ts__buckets_grad_ptr(const ts__buckets *d, size_t flat) {
  for (int k = 0; d->staged && k < d->nb; k++) {
    const bucket *b = &d->b[k];
    if (flat >= b->off && flat < b->off + b->len)
      return d->low ? (void *)((uint16_t *)d->slot[b->slot] + (flat - b->off)) : (void *)(d->slot[b->slot] + (flat - b->off));
  }
  return NULL;
}

float *ts__buckets_grad_addr(const ts__buckets *d, size_t flat) {
  if (d->low) return NULL;
  for (int k = 0; d->staged && k < d->nb; k++) {
    const bucket *b = &d->b[k];
    if (flat >= b->off && flat < b->off + b->len) return d->slot[b->slot] + (flat - b->off);
  }
  return NULL;
}

void ts__buckets_set_hier(ts__buckets *d, ts_comm_topo *t) {
  if (d && !d->nranks) d->hier = t; /* all-reduce mode only */
}

void ts__buckets_set_ring(ts__buckets *d, ts_comm *ring) {
  if (d && d->nranks) d->ring = ring; /* reduce-scatter mode only */
}

void ts__buckets_set_mode(ts__buckets *d, int blocking, int accumulate) {
  d->blocking = blocking;
  d->accumulate = accumulate && d->slot_out;
}

int ts__buckets_set_send(ts__buckets *d, const unsigned char *use, size_t *numel) {
  size_t big = 0;
  *numel = 0;
  if (d->nranks || d->wire != TS_F32)
    return ts_error_set(TS_EINVAL, "gradient buckets: a separate send buffer is for f32 all-reduces only");
  d->nclaim = 2;
  for (int k = 0; k < d->nb; k++) {
    d->b[k].use_send = use[k] != 0;
    d->b[k].send = -1;
    if (use[k] && d->b[k].len > big) big = d->b[k].len;
  }
  for (int s = 0; s < 2; s++) {
    ts_free(d->sslot[s]);
    d->sslot[s] = NULL;
    d->sowner[s] = -1;
    if (big && !(d->sslot[s] = ts_alloc(big * sizeof(float))))
      return ts_error_set(TS_ENOMEM, "gradient buckets: cannot allocate a send slot of %zu floats", big);
  }
  d->send_numel = big ? 2 * big : 0;
  *numel = d->send_numel;
  return TS_OK;
}

void ts__buckets_begin(ts__buckets *d, float *grads) {
  d->grads = grads;
  for (int k = 0; k < WIRE_SLOTS; k++) d->sowner[k] = -1;
  d->err = 0;
  d->defer_tail = d->comm && ts_comm_get_blocking(d->comm) == TS_COMM_BLOCKING_NATIVE;
  d->t_comm_wait = 0;
  for (int k = 0; k < d->nb; k++) {
    d->b[k].nready = d->b[k].pre_ready;
    d->b[k].started = d->b[k].done = 0;
    d->b[k].send = -1;
    d->b[k].send = -1;
  }
  for (int q = 0; d->staged && q < d->nslots; q++) d->slot_owner[q] = -1;
}

static void fail(ts__buckets *d) {
  d->err = TS_ECOMM;
  snprintf(d->errmsg, sizeof d->errmsg, "%s", ts_last_error());
}

/* Staged mode, before node `node` writes gradients of the buckets it is the first writer of:
 * the reduce-scatter of each one's slot's previous bucket completes first (started now if the
 * node that last touched it did not run). */
static void claim_slots(ts__buckets *d, int node) {
  double t0 = ts_time_now();
  for (int j = d->first_start[node]; j < d->first_start[node + 1] && !d->err; j++) {
    int k = d->first_bucket[j], s = d->b[k].slot, o = d->slot_owner[s];
    d->slot_owner[s] = k;
    if (o < 0 || o == k) continue;
    bucket *q = &d->b[o];
    if (!q->started && start_bucket(d, q)) {
      fail(d);
      return;
    }
    if (!q->done) {
      if (bucket_wait(q)) {
        fail(d);
        return;
      }
      finish_bucket(d, q, OBS_WAIT);
    }
  }
  d->t_comm_wait += ts_time_now() - t0;
  d->t_claim += ts_time_now() - t0;
}

static void poll(ts__buckets *d) {
  for (int k = 0; k < d->nb && !d->err; k++) {
    bucket *b = &d->b[k];
    if (!b->started || b->done) continue;
    int done = 0;
    if (bucket_test(b, &done)) {
      fail(d);
      return;
    }
    if (done) finish_bucket(d, b, OBS_TEST);
  }
}

void ts__buckets_hook(const ts_hook_info *e, void *user) {
  ts__buckets *d = user;
  int node = e->node;
  if (d->err || node < 0 || node >= d->nnodes) return;
  if (e->event == TS_HOOK_NODE_BEGIN && d->staged) claim_slots(d, node);
  if (e->event != TS_HOOK_NODE_END) return;
  for (int j = d->node_start[node]; j < d->node_start[node + 1]; j++) {
    bucket *b = &d->b[d->node_bucket[j]];
    if (++b->nready == b->nparams && !b->started && !(b->tail && d->defer_tail) && start_bucket(d, b)) {
      fail(d);
      return;
    }
  }
  poll(d);
}

int ts__buckets_finish(ts__buckets *d) {
  double t0 = ts_time_now();
  int rc = d->err;
  if (rc) return ts_error_set(rc, "%s", d->errmsg);
  /* first the buckets in flight, then those never started (gradients not produced this run,
   * overlap off, or the tail left for now), blocking, in bucket order, the same on every rank */
  for (int k = 0; k < d->nb && !rc; k++) {
    bucket *b = &d->b[k];
    if (!b->started || b->done) continue;
    rc = bucket_wait(b);
    if (!rc) finish_bucket(d, b, OBS_WAIT);
  }
  for (int k = 0; k < d->nb && !rc; k++)
    if (!d->b[k].started) rc = reduce_now(d, &d->b[k]);
  d->t_comm_wait += ts_time_now() - t0;
  return rc;
}

double ts__buckets_wait_seconds(const ts__buckets *d) { return d->t_comm_wait; }

double ts__buckets_take_claim_wait(ts__buckets *d) {
  double t = d->t_claim;
  d->t_claim = 0;
  return t;
}
