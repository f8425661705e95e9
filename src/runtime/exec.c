/* Executor and memory planner.
 *
 * Temporaries are placed in one arena by liveness: a value's bytes are claimed when its producer
 * runs and released after its last consumer (views such as RESHAPE share their source's bytes
 * and extend its life). Placement is best-fit over a free list of arena ranges, so buffers are
 * reused once dead; the arena's high-water mark is the planned peak. Kept values (loss, metrics,
 * unbound gradients) are never released. Bound values (inputs, params, states, gradients bound
 * to a flat buffer) live in caller memory and take no arena space. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "pack.h"
#include "device/dev.h"
#include "graph/graph_ir.h"
#include "runtime/dcoll.h"
#include "run_impl.h"
#include "kernels/lowp.h"

ts__run_fn ts__run[TS_OP_COUNT];
ts__run_fn ts__run_gpu[TS_OP_COUNT];

#define X(e, name, fam) void ts__register_run_##fam(ts__run_fn *tab);
#include "tessera/ops.def"
#undef X

static void run_init_once(void) {
  /* ops.def lists a family once per op; registering twice is harmless (same entries) */
#define X(e, name, fam) ts__register_run_##fam(ts__run);
#include "tessera/ops.def"
#undef X
  ts__run_lowp_install(ts__run);
  ts__register_run_gpu(ts__run_gpu);
  ts__register_run_gpu_coll(ts__run_gpu);
  ts__register_run_gpu_p2p(ts__run_gpu);
  ts__run_gpu_f16_install(ts__run_gpu);
}

void ts__run_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, run_init_once);
}

static ts_backend g_backend = TS_BACKEND_FAST;
void ts_backend_set(ts_backend b) { g_backend = b; }
ts_backend ts_backend_get(void) { return g_backend; }

/* What the executor needs of a value, copied from the graph at ts_plan_create. */
typedef struct {
  ts_shape shape;
  ts_dtype dtype;
  ts_val_kind kind;
  int producer; /* node index, -1 for leaves */
  int alias_of; /* value index it is a view of, -1 none */
} pval;

struct ts_plan {
  ts_graph *g;
  int nvals, nnodes;
  pval *vals;          /* per value */
  ts__run_node *nodes; /* per node */
  const char **opname; /* per node: its op's name (hook events, messages) */
  int *io;             /* per node: nin input then nout output value indices, from io_off[i] */
  int *io_off;
  void **bound;    /* caller memory per value, or NULL */
  char *keep;      /* value must stay readable after run */
  int64_t *offset; /* arena offset of temporaries (-1: none) */
  size_t *bytes;
  int planned;
  int dry;         /* ts_plan_create_dry: sized, never allocated, never run */
  /* ts_plan_share_scratch: temporaries that do not live across node `split` go to the owner's
   * scratch arena (shared by plans that never run at the same time), the rest to this arena */
  int split;
  ts_plan *owner;
  char *in_scratch;    /* per value */
  size_t scratch_peak; /* planned */
  char *scratch;       /* the owner's */
  size_t scratch_cap;
  char *live;      /* per node: its result is needed (kept, bound, or feeds a live node) */
  /* matmul+cast fusion (plan_fusions): fuse_out[i] is the f32 value a bf16 MATMUL node i writes
   * directly (the output of the CAST that is its only use), -1 none; fuse_done[j] is set while
   * CAST node j's result was written by its matmul this run */
  int *fuse_out;
  char *fuse_done;
  /* BN+ReLU fusion (plan_fusions): per node its role (FZ_*) and partner (BATCHNORM: its RELU;
   * RELU: its BATCHNORM; the relu's ELTWISE_BWD: the BATCHNORM_BWD; BATCHNORM_BWD: the forward
   * BATCHNORM); per fused BATCHNORM its 2C-float scale/shift buffer (the backward's ReLU mask)
   * and whether the last run of it wrote that buffer (ran fused) */
  char *fz_role;
  int *fz_peer;
  float **fz_ab;
  char *fz_valid;
  int nfused[TS_FUSION_COUNT]; /* planned, per ts_fusion kind */
  int ntaken[TS_FUSION_COUNT]; /* taken by the last run */
  int no_fusion;   /* ts_plan_set_fusion(p, 0) */
  int nlive;
  size_t peak, naive;
  char *arena;
  size_t arena_cap;
  struct {
    ts_plan_hook fn;
    void *user;
  } hooks[TS_PLAN_MAX_HOOKS];
  int nhooks;
  ts_comm **comms; /* ncomms slots (grown by ts_plan_set_comm) */
  int ncomms;
  struct ts__dcoll *dcolls[TS_PLAN_MAX_COMMS]; /* a GPU plan's device collectives per slot */
  /* ts_plan_set_device: a GPU (NULL: the CPU); then arena and scratch are device memory, and the
   * plan keeps a device scratch for nodes (dscratch) and one error flag per node (dflags) */
  ts__dev *dev;
  void *dscratch;
  size_t dscratch_cap;
  void *dwide; /* the f16 nodes' f32 copies (run_gpu_lowp.c), beside the node's own scratch */
  size_t dwide_cap;
  void *hstage; /* pinned host memory for the nodes staging through the host (SEND/RECV) */
  size_t hstage_cap;
  int64_t *dflags;
  /* channels last (plan_layouts): per value, 1 when a GPU plan keeps it NHWC; ncl of them */
  char *cl;
  int ncl;
  /* ts_plan_set_device_timing: CUDA events around every node (2 per node + the run's start) */
  int timing;
  ts__dev_event **tev;
  int ntev;
};

static int on_gpu(const ts_plan *p) { return p->dev && p->dev->info.kind == TS_DEVICE_GPU; }
static int plan_memory(ts_plan *p);
static void free_timing(ts_plan *p);
static void emit(const ts_plan *p, ts_hook_info *e);
/* arena memory on the plan's device */
static void *arena_alloc(ts_plan *p, size_t n) {
  if (!on_gpu(p)) return ts_alloc(n);
  void *x = NULL;
  return ts__dev_alloc(p->dev, n ? n : 64, &x) ? NULL : x;
}
static void arena_free(ts_plan *p, void *x) {
  if (!x) return;
  if (!on_gpu(p)) ts_free(x);
  else ts__dev_free(p->dev, x);
}

static size_t val_bytes(const pval *v) {
  return (size_t)ts_shape_numel(&v->shape) * ts_dtype_size(v->dtype);
}

static inline const int *node_in(const ts_plan *p, int i) { return p->io + p->io_off[i]; }
static inline const int *node_out(const ts_plan *p, int i) { return p->io + p->io_off[i] + p->nodes[i].nin; }

/* Short printable form of value v for messages: "x(64,784):f32". */
static const char *vstr(const ts_plan *p, int v, char *buf, size_t cap) {
  char s[128];
  const char *nm = ts_graph_value_name(p->g, v);
  snprintf(buf, cap, "%s%s:%s", nm ? nm : "", ts_shape_str(&p->vals[v].shape, s, sizeof s),
           ts_dtype_name(p->vals[v].dtype));
  return buf;
}

/* Copies the graph's nodes and values into the plan's own arrays (p->nvals, p->nnodes set). */
static int copy_graph(ts_plan *p) {
  const ts_graph *g = p->g;
  size_t nio = 0;
  for (int i = 0; i < p->nnodes; i++)
    nio += (size_t)(ts_graph_node_num_inputs(g, i) + ts_graph_node_num_outputs(g, i));
  p->vals = malloc(sizeof *p->vals * ((size_t)p->nvals + 1));
  p->nodes = malloc(sizeof *p->nodes * ((size_t)p->nnodes + 1));
  p->opname = malloc(sizeof *p->opname * ((size_t)p->nnodes + 1));
  p->io = malloc(sizeof *p->io * (nio + 1));
  p->io_off = malloc(sizeof *p->io_off * ((size_t)p->nnodes + 1));
  if (!p->vals || !p->nodes || !p->opname || !p->io || !p->io_off) return TS_ENOMEM;
  for (int v = 0; v < p->nvals; v++) {
    pval *x = &p->vals[v];
    x->shape = *ts_graph_value_shape(g, v);
    x->dtype = ts_graph_value_dtype(g, v);
    x->kind = ts_graph_value_kind(g, v);
    x->producer = ts_graph_value_producer(g, v);
    x->alias_of = ts_graph_value_alias_of(g, v);
  }
  int off = 0;
  for (int i = 0; i < p->nnodes; i++) {
    ts__run_node *n = &p->nodes[i];
    n->op = ts_graph_node_op(g, i);
    n->nin = ts_graph_node_num_inputs(g, i);
    n->nout = ts_graph_node_num_outputs(g, i);
    n->name = ts_graph_node_name(g, i);
    n->a = *ts_graph_node_attrs(g, i);
    p->opname[i] = ts_op_name(n->op);
    p->io_off[i] = off;
    for (int k = 0; k < n->nin; k++) p->io[off++] = ts_graph_node_input(g, i, k);
    for (int k = 0; k < n->nout; k++) p->io[off++] = ts_graph_node_output(g, i, k);
  }
  return TS_OK;
}

static int vindex(ts_plan *p, ts_val v, const char *what) {
  int i = ts_graph_value_index(p->g, v);
  if (i < 0 || i >= p->nvals)
    return ts_error_set(TS_EINVAL, "%s: value %d is not a value of the planned graph", what, (int)v) ,
           -1;
  return i;
}

static int plan_memory(ts_plan *p);

/* A dry plan's bindings: caller memory that is never looked at (the plan never runs). */
static char dry_bound;

static int plan_create(ts_graph *g, const ts_val *keep, int nkeep, int dry, ts_plan **out);

int ts_plan_create(ts_graph *g, const ts_val *keep, int nkeep, ts_plan **out) {
  return plan_create(g, keep, nkeep, 0, out);
}

int ts_plan_create_dry(ts_graph *g, const ts_val *keep, int nkeep, ts_plan **out) {
  return plan_create(g, keep, nkeep, 1, out);
}

int ts_plan_is_dry(const ts_plan *p) { return p && p->dry; }

static int plan_create(ts_graph *g, const ts_val *keep, int nkeep, int dry, ts_plan **out) {
  if (!g) return ts_error_set(TS_EINVAL, "ts_plan_create: null graph");
  if (ts_graph_status(g))
    return ts_error_set(ts_graph_status(g), "ts_plan_create: graph has an error: %s", ts_graph_error(g));
  ts__run_init();
  const int nnodes = ts_graph_num_nodes(g);
  for (int i = 0; i < nnodes; i++)
    if (!ts__run[ts_graph_node_op(g, i)])
      return ts_error_set(TS_EUNSUPPORTED, "ts_plan_create: op %s (node %s) has no executor",
                          ts_op_name(ts_graph_node_op(g, i)), ts_graph_node_name(g, i));
  ts_plan *p = calloc(1, sizeof *p);
  if (!p) return ts_error_set(TS_ENOMEM, "ts_plan_create: out of memory");
  p->g = g;
  p->dry = dry;
  p->nvals = ts_graph_num_values(g);
  p->nnodes = nnodes;
  p->bound = calloc((size_t)p->nvals, sizeof(void *));
  p->keep = calloc((size_t)p->nvals, 1);
  p->offset = malloc(sizeof(int64_t) * (size_t)p->nvals);
  p->bytes = malloc(sizeof(size_t) * (size_t)p->nvals);
  p->live = calloc((size_t)p->nnodes + 1, 1);
  p->in_scratch = calloc((size_t)p->nvals + 1, 1);
  p->fuse_out = malloc(sizeof(int) * ((size_t)p->nnodes + 1));
  p->fuse_done = calloc((size_t)p->nnodes + 1, 1);
  p->fz_role = calloc((size_t)p->nnodes + 1, 1);
  p->fz_peer = malloc(sizeof(int) * ((size_t)p->nnodes + 1));
  p->fz_ab = calloc((size_t)p->nnodes + 1, sizeof(float *));
  p->fz_valid = calloc((size_t)p->nnodes + 1, 1);
  p->cl = calloc((size_t)p->nvals + 1, 1);
  p->split = -1;
  if (!p->cl || !p->fz_role || !p->fz_peer || !p->fz_ab || !p->fz_valid || !p->live || !p->in_scratch || !p->fuse_out ||
      !p->fuse_done || !p->bound || !p->keep || !p->offset || !p->bytes || copy_graph(p)) {
    ts_plan_free(p);
    return ts_error_set(TS_ENOMEM, "ts_plan_create: out of memory");
  }
  for (int k = 0; k < nkeep; k++) {
    int i = vindex(p, keep[k], "ts_plan_create");
    if (i < 0) {
      ts_plan_free(p);
      return TS_EINVAL;
    }
    p->keep[i] = 1;
  }
  for (int i = 0; i < p->nvals; i++) p->bytes[i] = val_bytes(&p->vals[i]);
  *out = p;
  return TS_OK;
}

void ts_plan_free(ts_plan *p) {
  if (!p) return;
  free(p->bound);
  free(p->keep);
  free(p->live);
  free(p->in_scratch);
  free(p->fuse_out);
  free(p->fuse_done);
  if (p->fz_ab)
    for (int i = 0; i < p->nnodes; i++) arena_free(p, p->fz_ab[i]);
  free(p->fz_ab);
  free(p->fz_role);
  free(p->fz_peer);
  free(p->fz_valid);
  free(p->cl);
  if (p->owner == p) arena_free(p, p->scratch);
  else ts_free(p->scratch);
  if (p->dev) {
    arena_free(p, p->dscratch);
    arena_free(p, p->dwide);
    arena_free(p, p->dflags);
    ts__dev_host_free(p->dev, p->hstage);
  }
  free_timing(p);
  free(p->offset);
  free(p->bytes);
  free(p->vals);
  free(p->nodes);
  free(p->opname);
  free(p->io);
  free(p->io_off);
  arena_free(p, p->arena);
  free(p->comms);
  free(p);
}

static void free_timing(ts_plan *p) {
  for (int k = 0; k < p->ntev && p->dev; k++) ts__dev_event_destroy(p->dev, p->tev[k]);
  free(p->tev);
  p->tev = NULL;
  p->ntev = 0;
}

int ts_plan_set_device_timing(ts_plan *p, int on) {
  if (!p) return ts_error_set(TS_EINVAL, "ts_plan_set_device_timing: NULL plan");
  p->timing = on != 0;
  if (!p->timing && p->dev) ts__dev_sync(p->dev), free_timing(p);
  return TS_OK;
}

int ts_plan_device_timing(const ts_plan *p) { return p && p->timing && on_gpu(p); }

/* The device's times of the run's nodes [first, end), as NODE_TIMED events on the host's clock
 * (the run's start event at t_host0); after the run's synchronisation. */
static int emit_timed(ts_plan *p, const ts_graph *g, uint64_t step, int first, int end, double t_host0) {
  for (int i = first; i < end; i++) {
    if (!p->live[i]) continue;
    double a = 0, b = 0;
    int rc = ts__dev_event_elapsed(p->dev, p->tev[0], p->tev[1 + 2 * i], &a);
    if (!rc) rc = ts__dev_event_elapsed(p->dev, p->tev[0], p->tev[2 + 2 * i], &b);
    if (rc) return ts_error_wrap(rc, "timing node %s on the GPU", p->nodes[i].name);
    ts_hook_info ev = {TS_HOOK_NODE_TIMED, g, i, p->opname[i], p->nodes[i].name, step, t_host0 + a * 1e-3,
                       t_host0 + b * 1e-3};
    emit(p, &ev);
  }
  return TS_OK;
}

ts__dev *ts_plan_device(const ts_plan *p) { return p ? p->dev : NULL; }

int ts_plan_set_device(ts_plan *p, ts__dev *d) {
  if (!p) return ts_error_set(TS_EINVAL, "ts_plan_set_device: NULL plan");
  if (d && d->info.kind != TS_DEVICE_GPU) d = NULL; /* the CPU: host memory, as without */
  if (d == p->dev) return TS_OK;
  if (p->owner && p->owner != p)
    return ts_error_set(TS_EUNSUPPORTED, "ts_plan_set_device: a plan sharing another's scratch stays on its device");
  for (int i = 0; i < p->nnodes; i++) /* the BN+ReLU fusions' scale and shift, on the device left */
    arena_free(p, p->fz_ab[i]), p->fz_ab[i] = NULL;
  if (p->dev) { /* leaving a GPU: its memory goes with it */
    ts__dev_sync(p->dev);
    free_timing(p);
    arena_free(p, p->dscratch), arena_free(p, p->dflags), arena_free(p, p->dwide);
    ts__dev_host_free(p->dev, p->hstage);
    p->dscratch = NULL, p->dflags = NULL, p->dscratch_cap = 0, p->hstage = NULL, p->hstage_cap = 0;
    p->dwide = NULL, p->dwide_cap = 0;
  }
  arena_free(p, p->arena);
  if (p->owner == p) arena_free(p, p->scratch), p->scratch = NULL, p->scratch_cap = 0;
  p->arena = NULL;
  p->arena_cap = 0;
  p->dev = d;
  p->planned = 0; /* planned again (the fusions' buffers on the new device) */
  return TS_OK;
}

/* *buf (capacity *cap) grown to at least bytes, doubling from 64 KiB: device memory, or pinned host
 * memory (host); the device synchronised first (earlier nodes' kernels or copies may still use the
 * old one) */
static int grow_scratch(ts_plan *p, size_t bytes, void **buf, size_t *cap, int host, void **out) {
  *out = NULL;
  if (bytes > *cap) {
    size_t c = *cap ? *cap : 1 << 16;
    while (c < bytes) c *= 2;
    int rc = ts__dev_sync(p->dev);
    if (rc) return rc;
    if (host) ts__dev_host_free(p->dev, *buf);
    else arena_free(p, *buf);
    *buf = NULL, *cap = 0;
    if ((rc = host ? ts__dev_host_alloc(p->dev, c, buf) : ts__dev_alloc(p->dev, c, buf))) return rc;
    *cap = c;
  }
  *out = *buf;
  return TS_OK;
}

int ts__run_dev_scratch(ts__runctx *ctx, size_t bytes, void **out) {
  ts_plan *p = ctx->plan;
  *out = NULL;
  if (!on_gpu(p)) return ts_error_set(TS_EINVAL, "device scratch: not a GPU plan");
  return grow_scratch(p, bytes, &p->dscratch, &p->dscratch_cap, 0, out);
}

int ts__run_dev_wide(ts__runctx *ctx, size_t bytes, void **out) {
  ts_plan *p = ctx->plan;
  *out = NULL;
  if (!on_gpu(p)) return ts_error_set(TS_EINVAL, "device scratch: not a GPU plan");
  return grow_scratch(p, bytes, &p->dwide, &p->dwide_cap, 0, out);
}

int ts__run_host_stage(ts__runctx *ctx, size_t bytes, void **out) {
  ts_plan *p = ctx->plan;
  *out = NULL;
  if (!on_gpu(p)) return ts_error_set(TS_EINVAL, "host staging: not a GPU plan");
  return grow_scratch(p, bytes, &p->hstage, &p->hstage_cap, 1, out);
}

int ts_plan_bind(ts_plan *p, ts_val v, void *data) {
  int i = vindex(p, v, "ts_plan_bind");
  if (i < 0) return TS_EINVAL;
  if (p->dry) data = &dry_bound; /* only whether it is bound matters: the memory is never used */
  if (p->vals[i].producer >= 0 && (p->bound[i] == NULL) != (data == NULL)) p->planned = 0;
  p->bound[i] = data;
  return TS_OK;
}

int ts_plan_add_hook(ts_plan *p, ts_plan_hook fn, void *user) {
  if (!p || !fn) return ts_error_set(TS_EINVAL, "ts_plan_add_hook: null plan or hook");
  for (int k = 0; k < p->nhooks; k++)
    if (p->hooks[k].fn == fn && p->hooks[k].user == user) return TS_OK;
  if (p->nhooks == TS_PLAN_MAX_HOOKS)
    return ts_error_set(TS_ERANGE, "ts_plan_add_hook: at most %d hooks on a plan", TS_PLAN_MAX_HOOKS);
  p->hooks[p->nhooks].fn = fn;
  p->hooks[p->nhooks++].user = user;
  return TS_OK;
}

void ts_plan_remove_hook(ts_plan *p, ts_plan_hook fn, void *user) {
  if (!p) return;
  for (int k = 0; k < p->nhooks; k++)
    if (p->hooks[k].fn == fn && p->hooks[k].user == user) {
      memmove(&p->hooks[k], &p->hooks[k + 1], sizeof p->hooks[0] * (size_t)(p->nhooks - k - 1));
      p->nhooks--;
      return;
    }
}

static void emit(const ts_plan *p, ts_hook_info *e) {
  for (int k = 0; k < p->nhooks; k++) p->hooks[k].fn(e, p->hooks[k].user);
}

int ts_plan_set_comm(ts_plan *p, int slot, ts_comm *c) {
  if (!p || slot < 0 || slot >= TS_PLAN_MAX_COMMS)
    return ts_error_set(TS_EINVAL, "ts_plan_set_comm: slot %d outside 0..%d", slot, TS_PLAN_MAX_COMMS - 1);
  if (slot >= p->ncomms) {
    if (!c) return TS_OK; /* clearing a slot never set */
    int nc = p->ncomms ? p->ncomms : 8;
    while (nc <= slot) nc *= 2;
    if (nc > TS_PLAN_MAX_COMMS) nc = TS_PLAN_MAX_COMMS;
    ts_comm **n = realloc(p->comms, sizeof *n * (size_t)nc);
    if (!n) return ts_error_set(TS_ENOMEM, "ts_plan_set_comm: out of memory (slot %d)", slot);
    for (int k = p->ncomms; k < nc; k++) n[k] = NULL;
    p->comms = n;
    p->ncomms = nc;
  }
  p->comms[slot] = c;
  return TS_OK;
}

int ts_plan_set_dcoll(ts_plan *p, int slot, struct ts__dcoll *x) {
  if (!p || slot < 0 || slot >= TS_PLAN_MAX_COMMS)
    return ts_error_set(TS_EINVAL, "ts_plan_set_dcoll: slot %d outside 0..%d", slot, TS_PLAN_MAX_COMMS - 1);
  p->dcolls[slot] = x;
  return TS_OK;
}

ts_comm *ts_plan_comm(const ts_plan *p, int slot) {
  return p && slot >= 0 && slot < p->ncomms ? p->comms[slot] : NULL;
}

int ts_plan_set_const(ts_plan *p, ts_val v, float value) {
  if (!p) return ts_error_set(TS_EINVAL, "ts_plan_set_const: NULL plan");
  int i = vindex(p, v, "ts_plan_set_const");
  if (i < 0) return TS_EINVAL;
  int n = p->vals[i].producer;
  if (n < 0 || p->nodes[n].op != TS_OP_CONST) {
    char b[192];
    return ts_error_set(TS_EINVAL, "ts_plan_set_const: %s is not the output of a const node", vstr(p, i, b, sizeof b));
  }
  ts_attr_set_const_value(&p->nodes[n].a, value); /* the plan's copy: run_const fills it every run */
  return TS_OK;
}

int ts_plan_share_scratch(ts_plan *p, int split, ts_plan *owner) {
  if (!p || !owner || split < 0 || split > p->nnodes || (owner != p && owner->owner != owner && owner->owner))
    return ts_error_set(TS_EINVAL, "ts_plan_share_scratch: bad plan, split %d or owner", split);
  p->split = split;
  p->owner = owner;
  if (!owner->owner) owner->owner = owner;
  p->planned = 0;
  return TS_OK;
}

size_t ts_plan_scratch_bytes(const ts_plan *p) {
  if (!p->planned) plan_memory((ts_plan *)p);
  return p->owner ? p->scratch_peak : 0;
}

size_t ts_plan_scratch_arena_bytes(const ts_plan *p) { return p && p->owner == p ? p->scratch_cap : 0; }

/* A value is a live view of its source when it aliases and is neither bound nor kept. */
static int root_of(const ts_plan *p, int v) {
  while (p->vals[v].alias_of >= 0 && !p->bound[v] && !p->keep[v]) v = p->vals[v].alias_of;
  return v;
}

/* ---- best-fit free list over the arena ---- */
typedef struct { size_t off, len; } range;
typedef struct { range *r; int n, cap; size_t top; } freelist;

static size_t fl_alloc(freelist *f, size_t len) {
  int best = -1;
  for (int k = 0; k < f->n; k++)
    if (f->r[k].len >= len && (best < 0 || f->r[k].len < f->r[best].len)) best = k;
  if (best >= 0) {
    size_t off = f->r[best].off;
    f->r[best].off += len;
    f->r[best].len -= len;
    if (f->r[best].len == 0) f->r[best] = f->r[--f->n];
    return off;
  }
  /* grow the top, reusing a free range that ends at the top */
  for (int k = 0; k < f->n; k++)
    if (f->r[k].off + f->r[k].len == f->top) {
      size_t off = f->r[k].off;
      f->top = off + len;
      f->r[k] = f->r[--f->n];
      return off;
    }
  size_t off = f->top;
  f->top += len;
  return off;
}

static int fl_free(freelist *f, size_t off, size_t len) {
  /* merge with neighbours */
  for (int k = 0; k < f->n; k++) {
    if (f->r[k].off + f->r[k].len == off) {
      off = f->r[k].off;
      len += f->r[k].len;
      f->r[k--] = f->r[--f->n];
    } else if (off + len == f->r[k].off) {
      len += f->r[k].len;
      f->r[k--] = f->r[--f->n];
    }
  }
  if (f->n == f->cap) {
    int nc = f->cap ? f->cap * 2 : 64;
    range *q = realloc(f->r, sizeof(range) * (size_t)nc);
    if (!q) return -1;
    f->r = q;
    f->cap = nc;
  }
  f->r[f->n].off = off;
  f->r[f->n].len = len;
  f->n++;
  return 0;
}

/* Matmul+cast fusion. Under mixed precision a weight's gradient is a bf16 MATMUL (dW = dy^T x)
 * cast to the f32 master's dtype (the CAST's gradient rule); when the product's only use is that
 * cast and the cast's result lives in caller memory (a gradient bound to the parameter store or
 * a data-parallel bucket, valid for the whole run), the matmul writes f32 there directly
 * (oneDNN bf16 x bf16 -> f32, f32 accumulation) and the cast node does nothing: the bf16 write,
 * its re-read and the f32 write of the cast are saved, and the gradient skips one rounding to
 * bf16 (it is the f32 sum the cast would have widened, before rounding). The cast node still
 * "runs" (its hooks fire: a data-parallel bucket is ready after it, as without the fusion).
 * Planned with the memory (binding decides which results are caller memory); taken at run time
 * on the FAST backend for bf16 only (REF and f16 run both nodes as written).
 *
 * BN+ReLU fusion (ResNet's conv-bn-relu): a BATCHNORM (x f32, or bf16 with a plain relu; with
 * spatial dims) whose output z has no use but an ELTWISE relu writes the relu's output y itself
 * (the relu node does nothing), keeping its per-channel scale and shift (2C floats, plan
 * memory). When the relu's ELTWISE_BWD (from y, as autodiff emits it) produces dz whose only use
 * is that BATCHNORM's BATCHNORM_BWD, the ELTWISE_BWD does nothing and the BATCHNORM_BWD reads dy (of y) instead of dz
 * and recomputes where y > 0 from x and the scale and shift: z and dz are never written, and
 * y > 0 needs no read of y. Same arithmetic in the same order: bitwise the unfused nodes. For
 * the memory plan y is produced at the BATCHNORM and dy lives until the BATCHNORM_BWD (the plan
 * is the same with the fusion taken or not: REF runs every node as written).
 *
 * Matmul+bias+GeLU (GPT's c_fc in an evaluation plan): a MATMUL or DENSE (with its bias) whose
 * output z has no use but a gelu (tanh or erf) writes the gelu's output y itself, through one
 * oneDNN matmul primitive with the gelu as an eltwise post-op on the f32 accumulator (the gelu
 * node does nothing; z is never written). f32 (z, y f32) and bf16 (amp O2/O3: z, y bf16, y
 * rounded once; O1: z bf16 widened by a CAST to f32 whose only use is the f32 gelu, so the
 * primitive writes f32 y and the cast does nothing too). GeLU's backward reads z, so a plan with
 * backward never has the pattern: it is taken by plans without backward (evaluation, predict).
 * f32: bitwise the unfused nodes in every shape measured (the unfused dense is dnnl_sgemm, the
 * same oneDNN GEMM kernels; not guaranteed for every shape); bf16: gelu of the f32 sum instead of
 * its bf16 rounding, one rounding fewer (docs/mixed-precision.md, Fusions).
 * For the memory plan y is produced at the matmul; z (and the cast's result) keep their buffers
 * (REF, or a plan run both ways, writes them). */
enum { FZ_NONE = 0, FZ_BN, FZ_RELU, FZ_RELU_BWD, FZ_BN_BWD, FZ_MM_GELU, FZ_GELU };

/* v is a temporary read by node r only (no other reader, no view, not kept or bound). */
static int only_use(const ts_plan *p, const int *uses, const int *cons, int v, int r) {
  return !p->bound[v] && !p->keep[v] && uses[v] == 1 && cons[v] == r;
}

/* Spatial elements per channel of a batch norm's x (N,C,...). */
static int64_t bn_spatial(const ts_shape *s) {
  int64_t S = 1;
  for (int d = 2; d < s->ndim; d++) S *= s->dims[d];
  return S;
}

static void plan_fusions(ts_plan *p) {
  for (int i = 0; i < p->nnodes; i++) {
    p->fuse_out[i] = -1, p->fuse_done[i] = 0;
    p->fz_role[i] = FZ_NONE, p->fz_peer[i] = -1, p->fz_valid[i] = 0;
    arena_free(p, p->fz_ab[i]);
    p->fz_ab[i] = NULL;
  }
  memset(p->nfused, 0, sizeof p->nfused);
  if (p->no_fusion) return;
  int *uses = calloc((size_t)p->nvals + 1, sizeof(int)), *cons = malloc(sizeof(int) * ((size_t)p->nvals + 1));
  if (!uses || !cons) { /* no fusion: the nodes run as written */
    free(uses);
    free(cons);
    return;
  }
  for (int v = 0; v < p->nvals; v++) cons[v] = -1; /* the last live node reading v */
  for (int i = 0; i < p->nnodes; i++) {
    if (!p->live[i]) continue;
    const int *in = node_in(p, i);
    for (int k = 0; k < p->nodes[i].nin; k++) uses[in[k]]++, cons[in[k]] = i;
  }
  for (int v = 0; v < p->nvals; v++) /* a view of a value is a use of it */
    if (p->vals[v].alias_of >= 0) uses[p->vals[v].alias_of]++;
  for (int j = 0; j < p->nnodes; j++) {
    const ts__run_node *n = &p->nodes[j];
    if (!p->live[j] || n->op != TS_OP_CAST || n->nin != 1 || n->nout != 1) continue;
    const int u = node_in(p, j)[0], w = node_out(p, j)[0], i = p->vals[u].producer;
    if (p->vals[u].dtype != TS_BF16 || p->vals[w].dtype != TS_F32 || !p->bound[w] || p->bound[u] || p->keep[u] ||
        uses[u] != 1 || i < 0 || i >= j || !p->live[i] || p->nodes[i].op != TS_OP_MATMUL || p->nodes[i].nout != 1)
      continue;
    p->fuse_out[i] = w;
    p->nfused[TS_FUSION_MATMUL_CAST]++;
  }
  /* BN+ReLU forward: relu j of z = BATCHNORM i's y, z used by j only */
  for (int j = 0; j < p->nnodes; j++) {
    const ts__run_node *n = &p->nodes[j];
    if (!p->live[j] || n->op != TS_OP_ELTWISE || n->nin != 1 || n->nout != 1 ||
        ts_attr_eltwise_alg(&n->a) != TS_ELT_RELU)
      continue;
    const int z = node_in(p, j)[0], i = p->vals[z].producer;
    if (i < 0 || i >= j || !p->live[i] || p->nodes[i].op != TS_OP_BATCHNORM || p->nodes[i].nout != 3 ||
        node_out(p, i)[0] != z || p->bound[z] || p->keep[z] || uses[z] != 1 || p->fz_role[i] ||
        (p->vals[z].dtype != TS_F32 && (p->vals[z].dtype != TS_BF16 || ts_attr_eltwise_alpha(&n->a) != 0.0f)) ||
        bn_spatial(&p->vals[z].shape) < 2)
      continue;
    if (!p->dry) { /* on the plan's device (a GPU's BN+ReLU writes it there) */
      p->fz_ab[i] = arena_alloc(p, sizeof(float) * (size_t)(2 * p->vals[z].shape.dims[1]));
      if (!p->fz_ab[i]) continue; /* not fused */
    }
    p->fz_role[i] = FZ_BN, p->fz_peer[i] = j;
    p->fz_role[j] = FZ_RELU, p->fz_peer[j] = i;
    p->nfused[TS_FUSION_BN_RELU]++;
  }
  /* BN+ReLU backward: the relu's ELTWISE_BWD e (from y) -> dz used only by BATCHNORM_BWD k of i */
  for (int e = 0; e < p->nnodes; e++) {
    const ts__run_node *n = &p->nodes[e];
    if (!p->live[e] || n->op != TS_OP_ELTWISE_BWD || n->nin != 2 || n->nout != 1 ||
        ts_attr_eltwise_alg(&n->a) != TS_ELT_RELU || !ts_attr_eltwise_use_dst(&n->a))
      continue;
    const int y = node_in(p, e)[1], dz = node_out(p, e)[0], j = p->vals[y].producer;
    if (j < 0 || p->fz_role[j] != FZ_RELU || ts_attr_eltwise_alpha(&p->nodes[j].a) != ts_attr_eltwise_alpha(&n->a) ||
        p->bound[dz] || p->keep[dz] || uses[dz] != 1)
      continue;
    const int i = p->fz_peer[j], k = cons[dz]; /* -1 when dz's one use is a view */
    if (k <= e || !p->live[k] || p->nodes[k].op != TS_OP_BATCHNORM_BWD || p->nodes[k].nin != 5) continue;
    const int *ki = node_in(p, k), *io = node_out(p, i);
    if (ki[0] != dz ||
        ki[1] != node_in(p, i)[0] || ki[3] != io[1] || ki[4] != io[2] || p->fz_role[k] ||
        p->vals[node_in(p, e)[0]].dtype != p->vals[dz].dtype)
      continue;
    p->fz_role[e] = FZ_RELU_BWD, p->fz_peer[e] = k;
    p->fz_role[k] = FZ_BN_BWD, p->fz_peer[k] = i;
    p->nfused[TS_FUSION_BN_RELU_BWD]++;
  }
  /* matmul+bias+gelu: gelu j of z, z = MATMUL/DENSE i's output, or the bf16 -> f32 CAST c of it */
  for (int j = 0; j < p->nnodes; j++) {
    const ts__run_node *n = &p->nodes[j];
    if (!p->live[j] || n->op != TS_OP_ELTWISE || n->nin != 1 || n->nout != 1 ||
        (ts_attr_eltwise_alg(&n->a) != TS_ELT_GELU_TANH && ts_attr_eltwise_alg(&n->a) != TS_ELT_GELU_ERF))
      continue;
    int z = node_in(p, j)[0], i = p->vals[z].producer, r = j;
    if (i < 0 || !only_use(p, uses, cons, z, j)) continue;
    if (p->nodes[i].op == TS_OP_CAST) { /* O1: bf16 matmul, f32 gelu */
      if (p->vals[z].dtype != TS_F32 || p->nodes[i].nin != 1 || p->fz_role[i]) continue;
      r = i, z = node_in(p, i)[0], i = p->vals[z].producer;
      if (i < 0 || p->vals[z].dtype != TS_BF16 || !only_use(p, uses, cons, z, r)) continue;
    }
    const ts__run_node *m = &p->nodes[i];
    if (i >= r || !p->live[i] || (m->op != TS_OP_MATMUL && m->op != TS_OP_DENSE) || m->nout != 1 ||
        node_out(p, i)[0] != z || p->fz_role[i] || p->fuse_out[i] >= 0)
      continue;
    const ts_dtype dt = p->vals[z].dtype, ydt = p->vals[node_out(p, j)[0]].dtype;
    if ((dt != TS_F32 && dt != TS_BF16) || (ydt != dt && r == j)) continue;
    int same = 1; /* operands of the node's dtype (the graph ensures it; the kernel relies on it) */
    for (int k = 0; k < m->nin; k++) same &= p->vals[node_in(p, i)[k]].dtype == dt;
    if (!same) continue;
    p->fz_role[i] = FZ_MM_GELU, p->fz_peer[i] = j;
    p->fz_role[j] = FZ_GELU, p->fz_peer[j] = i;
    p->nfused[TS_FUSION_MATMUL_BIAS_GELU]++;
  }
  free(uses);
  free(cons);
}

int ts_plan_num_fusions(const ts_plan *p, ts_fusion kind) {
  if (!p || (int)kind < 0 || kind >= TS_FUSION_COUNT) return 0;
  if (!p->planned && plan_memory((ts_plan *)p)) return 0;
  return p->nfused[kind];
}

int ts_plan_fusions_taken(const ts_plan *p, ts_fusion kind) {
  if (!p || (int)kind < 0 || kind >= TS_FUSION_COUNT) return 0;
  return p->ntaken[kind];
}

void ts_plan_set_fusion(ts_plan *p, int on) {
  if (!p || p->no_fusion == !on) return;
  p->no_fusion = !on;
  p->planned = 0; /* planned again (with or without the fusions) before the next run */
}

/* Channels last (run_gpu_conv.c): which 4-d values a GPU plan keeps NHWC. Values joined by
 * element-wise nodes (TS__CL_ANY) form groups of one layout (union-find); a group is NHWC when a
 * node that runs NHWC (TS__CL_CAN) lays out one of its values, and no member is bound, kept, a
 * view or viewed, a leaf, or laid out by a node that keeps NCHW (TS__CL_NO, or a slot outside a
 * node's masks). Values whose two layouts are the same memory (ts__cl_same) take no part.
 * TESSERA_GPU_CHANNELS_LAST=0 turns it off, =1 on; unset: on when a live convolution is bf16 or
 * f16 (cuDNN's tensor cores want NHWC; real f32 keeps NCHW). */
static int cl_wanted(const ts_plan *p) {
  const char *e = getenv("TESSERA_GPU_CHANNELS_LAST");
  if (e && *e) return strcmp(e, "0") != 0;
  for (int i = 0; i < p->nnodes; i++)
    if (p->live[i] && p->nodes[i].op == TS_OP_CONV2D && ts__is_lowp(p->vals[node_out(p, i)[0]].dtype)) return 1;
  return 0;
}
static int cl_find(int *up, int v) {
  while (up[v] != v) v = up[v] = up[up[v]];
  return v;
}
static int plan_layouts(ts_plan *p) {
  const int nv = p->nvals;
  memset(p->cl, 0, (size_t)nv);
  p->ncl = 0;
  if (!on_gpu(p) || !cl_wanted(p)) return TS_OK;
  int *up = malloc(sizeof(int) * (size_t)nv);
  char *st = calloc((size_t)nv, 1); /* 1: laid out NHWC by a node, 2: must stay NCHW */
  if (!up || !st) {
    free(up), free(st);
    return ts_error_set(TS_ENOMEM, "memory plan: out of memory (channels last)");
  }
  for (int v = 0; v < nv; v++) up[v] = v;
  for (int v = 0; v < nv; v++) { /* views and what they view keep NCHW */
    const pval *x = &p->vals[v];
    if (x->alias_of >= 0) st[v] = st[x->alias_of] = 2;
    if (x->producer < 0 || p->bound[v] || p->keep[v]) st[v] = 2;
  }
  ts_tensor in[TS_GRAPH_MAX_IO], out[TS_GRAPH_MAX_IO];
  for (int i = 0; i < p->nnodes; i++) {
    if (!p->live[i]) continue;
    const ts__run_node *n = &p->nodes[i];
    const int *vin = node_in(p, i), *vout = vin + n->nin;
    for (int k = 0; k < n->nin; k++) ts_tensor_view(&in[k], p->vals[vin[k]].dtype, p->vals[vin[k]].shape, NULL);
    for (int k = 0; k < n->nout; k++) ts_tensor_view(&out[k], p->vals[vout[k]].dtype, p->vals[vout[k]].shape, NULL);
    unsigned ain = 0, aout = 0;
    const ts__cl_kind kind = ts__run_gpu_cl(n, in, out, &ain, &aout);
    int first = -1;
    for (int k = 0; k < n->nin + n->nout; k++) {
      const int v = vin[k], act = k < n->nin ? (int)(ain >> k & 1) : (int)(aout >> (k - n->nin) & 1);
      if (ts__cl_same(&p->vals[v].shape)) continue;
      if (kind == TS__CL_NO || !act) st[v] = 2;
      else if (kind == TS__CL_CAN) st[v] = st[v] ? st[v] : 1;
      else if (first < 0) first = v;
      else up[cl_find(up, v)] = cl_find(up, first);
    }
  }
  char *g = calloc((size_t)nv, 1); /* per group root: 1 NHWC wanted, 2 forbidden */
  if (!g) {
    free(up), free(st);
    return ts_error_set(TS_ENOMEM, "memory plan: out of memory (channels last)");
  }
  for (int v = 0; v < nv; v++) g[cl_find(up, v)] |= st[v];
  for (int v = 0; v < nv; v++)
    if (g[cl_find(up, v)] == 1 && !ts__cl_same(&p->vals[v].shape)) p->cl[v] = 1, p->ncl++;
  free(g), free(up), free(st);
  return TS_OK;
}

int ts_plan_channels_last_values(const ts_plan *p) {
  if (p && !p->planned && plan_memory((ts_plan *)p)) return -1;
  return p ? p->ncl : 0;
}

static int plan_memory(ts_plan *p) {
  int nv = p->nvals, nn = p->nnodes;
  int *last = malloc(sizeof(int) * (size_t)nv);
  int *first = malloc(sizeof(int) * (size_t)nv); /* the node a placed temporary is placed at, else -1 */
  ts__interval *items = malloc(sizeof(ts__interval) * (size_t)(nv + 1));
  size_t *goff = malloc(sizeof(size_t) * (size_t)(nv + 1));
  int **dying = NULL;
  int *ndying = calloc((size_t)nn, sizeof(int));
  freelist f = {0}, fs = {0};
  int rc = TS_OK;
  if (!last || !ndying || !first || !items || !goff) goto oom;
  /* Dead-node elimination: a node runs only if one of its outputs is kept or bound, feeds a live
   * node, or it updates persistent state (BatchNorm running statistics). Gradients nobody asked
   * for (e.g. of the data input) are never computed. */
  {
    char *need = calloc((size_t)nv, 1);
    if (!need) goto oom;
    for (int v = 0; v < nv; v++) need[v] = p->keep[v] || p->bound[v];
    p->nlive = 0;
    for (int i = nn - 1; i >= 0; i--) {
      const ts__run_node *n = &p->nodes[i];
      const int *in = node_in(p, i), *out = node_out(p, i);
      int l = 0;
      for (int k = 0; k < n->nout; k++) l |= need[out[k]];
      for (int k = 0; k < n->nin; k++) l |= p->vals[in[k]].kind == TS_VAL_STATE;
      p->live[i] = (char)l;
      p->nlive += l;
      if (l)
        for (int k = 0; k < n->nin; k++) need[in[k]] = 1;
    }
    free(need);
  }
  if (on_gpu(p)) /* every node that runs needs a GPU kernel */
    for (int i = 0; i < nn; i++)
      if (p->live[i] && !ts__run_gpu[p->nodes[i].op]) {
        rc = ts_error_set(TS_EUNSUPPORTED, "node %s: op %s has no GPU kernel yet (docs/gpu.md)", p->nodes[i].name,
                          p->opname[i]);
        goto done;
      }
  plan_fusions(p); /* before the liveness below: a fusion moves a write and extends a read */
  if ((rc = plan_layouts(p))) goto done;
  for (int v = 0; v < nv; v++) {
    last[v] = p->vals[v].producer;
    p->offset[v] = -1;
    first[v] = -1;
  }
  for (int i = 0; i < nn; i++) {
    const ts__run_node *n = &p->nodes[i];
    const int *in = node_in(p, i), *out = node_out(p, i);
    if (!p->live[i]) continue;
    for (int k = 0; k < n->nin; k++) {
      int r = root_of(p, in[k]);
      if (i > last[r]) last[r] = i;
    }
    for (int k = 0; k < n->nout; k++) { /* a view extends its root's life to its own uses */
      int r = root_of(p, out[k]);
      if (i > last[r]) last[r] = i;
    }
    if (p->fz_role[i] == FZ_BN_BWD) { /* reads the relu's dy in place of its ELTWISE_BWD's result */
      int r = root_of(p, node_in(p, p->vals[node_in(p, i)[0]].producer)[0]);
      if (i > last[r]) last[r] = i;
    }
  }
  /* list of values whose life ends at each node */
  dying = calloc((size_t)nn, sizeof(int *));
  if (!dying) goto oom;
  for (int v = 0; v < nv; v++) {
    const pval *x = &p->vals[v];
    if (x->producer < 0 || p->bound[v] || p->keep[v] || root_of(p, v) != v) continue;
    if (!p->live[x->producer]) continue;
    ndying[last[v]]++;
  }
  for (int i = 0; i < nn; i++) {
    dying[i] = malloc(sizeof(int) * (size_t)(ndying[i] + 1));
    if (!dying[i]) goto oom;
    ndying[i] = 0;
  }
  for (int v = 0; v < nv; v++) {
    const pval *x = &p->vals[v];
    if (x->producer < 0 || p->bound[v] || p->keep[v] || root_of(p, v) != v) continue;
    if (!p->live[x->producer]) continue;
    dying[last[v]][ndying[last[v]]++] = v;
  }
  p->naive = 0;
  for (int i = 0; i < nn; i++) {
    const ts__run_node *n = &p->nodes[i];
    const int *out = node_out(p, i);
    if (!p->live[i]) continue;
    /* a fused BATCHNORM (matmul) writes its relu's (gelu's) output: placed with its own outputs */
    const int ny = p->fz_role[i] == FZ_BN || p->fz_role[i] == FZ_MM_GELU ? 1 : 0;
    for (int k = 0; k < n->nout + ny; k++) {
      int v = k < n->nout ? out[k] : node_out(p, p->fz_peer[i])[0];
      if ((p->fz_role[i] == FZ_RELU || p->fz_role[i] == FZ_GELU) && k == 0) continue; /* placed at its producer */
      if (p->bound[v] || root_of(p, v) != v) continue;
      size_t len = (p->bytes[v] + 63) & ~(size_t)63;
      if (len == 0) len = 64;
      /* shared scratch: neither kept nor alive across the split (produced before it and read at
       * or after it) */
      p->in_scratch[v] = p->owner && !p->keep[v] && !(i < p->split && last[v] >= p->split);
      p->offset[v] = (int64_t)fl_alloc(p->in_scratch[v] ? &fs : &f, len);
      p->naive += len;
      first[v] = i;
    }
    for (int k = 0; k < ndying[i]; k++) {
      int v = dying[i][k];
      size_t len = (p->bytes[v] + 63) & ~(size_t)63;
      if (len == 0) len = 64;
      if (fl_free(p->in_scratch[v] ? &fs : &f, (size_t)p->offset[v], len)) goto oom;
    }
  }
  /* the same temporaries placed offline, greedy by size (pack.c): kept per arena where lower */
  for (int a = 0; a < 2; a++) {
    freelist *fa = a ? &fs : &f;
    int n = 0;
    for (int v = 0; v < nv; v++)
      if (first[v] >= 0 && p->in_scratch[v] == a) {
        size_t len = (p->bytes[v] + 63) & ~(size_t)63;
        items[n].len = len ? len : 64;
        items[n].first = first[v];
        items[n].last = p->keep[v] ? nn : last[v];
        items[n].id = v;
        n++;
      }
    size_t top;
    if (ts__pack_greedy(items, n, goff, &top)) goto oom;
    if (top < fa->top) {
      fa->top = top;
      for (int k = 0; k < n; k++) p->offset[items[k].id] = (int64_t)goff[items[k].id];
    }
  }
  p->peak = f.top;
  p->scratch_peak = fs.top;
  if (p->owner && !p->dry && p->scratch_peak > p->owner->scratch_cap) {
    /* nothing lives in the scratch between runs: it can move */
    arena_free(p->owner, p->owner->scratch);
    p->owner->scratch = arena_alloc(p->owner, p->scratch_peak);
    p->owner->scratch_cap = p->owner->scratch ? p->scratch_peak : 0;
    if (!p->owner->scratch) goto oom;
  }
  if (p->peak > p->arena_cap && !p->dry) {
    arena_free(p, p->arena);
    p->arena = arena_alloc(p, p->peak);
    if (!p->arena) {
      p->arena_cap = 0;
      goto oom;
    }
    p->arena_cap = p->peak;
  }
  p->planned = 1;
  goto done;
oom:
  rc = ts_error_set(TS_ENOMEM, "memory plan: out of memory");
done:
  if (dying)
    for (int i = 0; i < nn; i++) free(dying[i]);
  free(dying);
  free(ndying);
  free(last);
  free(first);
  free(items);
  free(goff);
  free(f.r);
  free(fs.r);
  return rc;
}

size_t ts_plan_peak_bytes(const ts_plan *p) {
  if (!p->planned) plan_memory((ts_plan *)p);
  return p->peak;
}
int ts_plan_num_live_nodes(const ts_plan *p) {
  if (!p->planned) plan_memory((ts_plan *)p);
  return p->nlive;
}
size_t ts_plan_arena_bytes(const ts_plan *p) { return p ? p->arena_cap : 0; }

int ts_plan_node_live(const ts_plan *p, int node) {
  if (!p || node < 0 || node >= p->nnodes) return 0;
  if (!p->planned) {
    int rc = plan_memory((ts_plan *)p);
    if (rc) return rc;
  }
  return p->live[node] != 0;
}
size_t ts_plan_naive_bytes(const ts_plan *p) {
  if (!p->planned) plan_memory((ts_plan *)p);
  return p->naive;
}

static void *data_of(ts_plan *p, int v) {
  if (p->bound[v]) return p->bound[v];
  int r = root_of(p, v);
  if (r != v) return data_of(p, r);
  if (p->offset[v] >= 0) return (p->in_scratch[v] ? p->owner->scratch : p->arena) + p->offset[v];
  return NULL;
}

void *ts_plan_data(ts_plan *p, ts_val v) {
  if (p->dry) return NULL;
  int i = ts_graph_value_index(p->g, v);
  if (i < 0 || i >= p->nvals) return NULL;
  if (!p->bound[i] && !p->keep[i] && p->vals[i].producer >= 0) return NULL;
  return p->planned ? data_of(p, i) : p->bound[i];
}

int ts_plan_run(ts_plan *p, uint64_t step) { return ts_plan_run_range(p, step, 0, -1); }

/* A GPU run's end: the device collectives it queued work on (ctx->used) waited for within
 * parallel.comm_timeout (NCCL's polled and aborted past it, TS_ECOMM: a stalled or dead peer ends
 * the run instead of the synchronisation below waiting for ever), then its kernels; then the first
 * node whose kernel flagged its data (a label or an id out of range, at position flag - 1). */
static int gpu_flags(ts_plan *p, const ts__runctx *ctx) {
  int rc = TS_OK;
  for (int k = 0; k < ctx->nused && !ctx->used_all && !rc; k++)
    rc = ts__dcoll_wait(ctx->used[k], NULL, ts_comm_get_timeout(), "collective of the plan");
  for (int s = 0; ctx->used_all && s < p->ncomms && !rc; s++) { /* more than it tracks: each slot's once */
    struct ts__dcoll *x = p->dcolls[s];
    int seen = !x;
    for (int t = 0; t < s && !seen; t++) seen = p->dcolls[t] == x;
    if (!seen) rc = ts__dcoll_wait(x, NULL, ts_comm_get_timeout(), "collective of the plan");
  }
  if (rc) return rc;
  int64_t *f = malloc(sizeof(int64_t) * (size_t)(p->nnodes + 1));
  if (!f) return ts_error_set(TS_ENOMEM, "ts_plan_run: out of memory");
  rc = ts__dev_copy(p->dev, f, p->dflags, sizeof(int64_t) * (size_t)(p->nnodes + 1), TS__D2H, NULL);
  if (!rc) rc = ts__dev_sync(p->dev);
  for (int i = 0; !rc && i < p->nnodes; i++)
    if (f[i] > 0)
      rc = ts_error_set(TS_ERANGE, "node %s (%s): row %lld holds a class or id outside the valid range", p->nodes[i].name,
                        p->opname[i], (long long)(f[i] - 1));
  free(f);
  return rc;
}

int ts_plan_run_range(ts_plan *p, uint64_t step, int first, int end) {
  ts_graph *g = p->g;
  if (p->dry) return ts_error_set(TS_EINVAL, "ts_plan_run: a dry plan (ts_plan_create_dry) is for sizing only");
  if (end < 0 || end > p->nnodes) end = p->nnodes;
  if (first < 0) first = 0;
  if (ts_graph_num_values(g) != p->nvals || ts_graph_num_nodes(g) != p->nnodes)
    return ts_error_set(TS_EGRAPH, "ts_plan_run: the graph changed after planning (%d nodes, planned %d)",
                        ts_graph_num_nodes(g), p->nnodes);
  for (int v = 0; v < p->nvals; v++)
    if (p->vals[v].producer < 0 && !p->bound[v]) {
      char s[160];
      const ts_val_kind kind = p->vals[v].kind;
      return ts_error_set(TS_EINVAL, "ts_plan_run: %s %s is not bound to memory",
                          kind == TS_VAL_INPUT ? "input" : kind == TS_VAL_PARAM ? "parameter" : "state",
                          vstr(p, v, s, sizeof s));
    }
  if (!p->planned) {
    int rc = plan_memory(p);
    if (rc) return rc;
  }
  ts__runctx ctx = {g, step, g_backend, p->comms, p->ncomms, NULL, NULL, NULL, p, p->dcolls, {NULL}, 0, 0, 0, 0};
  const int gpu = on_gpu(p);
  const int fast = ctx.backend == TS_BACKEND_FAST || gpu; /* the fusions are taken (REF: every node as written) */
  ts__run_fn *tab = gpu ? ts__run_gpu : ts__run;
  if (gpu) {
    ctx.dev = p->dev;
    int rc0 = TS_OK;
    if (!p->dflags) rc0 = ts__dev_alloc(p->dev, sizeof(int64_t) * (size_t)(p->nnodes + 1), (void **)&p->dflags);
    if (!rc0) rc0 = ts__dev_memset0(p->dev, p->dflags, sizeof(int64_t) * (size_t)(p->nnodes + 1), NULL);
    if (!rc0 && p->timing && !p->tev) { /* the run's start, then before and after each node */
      if (!(p->tev = calloc((size_t)(2 * p->nnodes + 1), sizeof *p->tev)))
        rc0 = ts_error_set(TS_ENOMEM, "ts_plan_run: out of memory (GPU timing events)");
      for (; !rc0 && p->ntev < 2 * p->nnodes + 1; p->ntev++) rc0 = ts__dev_event_create(p->dev, &p->tev[p->ntev]);
    }
    if (!rc0 && p->timing) rc0 = ts__dev_event_record(p->dev, p->tev[0], NULL);
    if (rc0) return rc0;
  }
  const int timed = gpu && p->timing;
  const double t_host0 = timed ? ts_time_now() : 0;
  if (first == 0) { /* nothing of an earlier (partial) run is skipped in this one */
    memset(p->ntaken, 0, sizeof p->ntaken);
    memset(p->fuse_done, 0, (size_t)p->nnodes);
  }
  ts_tensor in[TS_GRAPH_MAX_IO], out[TS_GRAPH_MAX_IO];
  ts_hook_info ev = {TS_HOOK_RUN_BEGIN, g, -1, NULL, NULL, step, 0, 0};
  if (p->nhooks) emit(p, &ev);
  int rc = TS_OK;
  for (int i = first; i < end; i++) {
    const ts__run_node *n = &p->nodes[i];
    if (!p->live[i]) continue;
    const int *vin = node_in(p, i), *vout = vin + n->nin;
    for (int k = 0; k < n->nin; k++) {
      const pval *x = &p->vals[vin[k]];
      ts_tensor_view(&in[k], x->dtype, x->shape, data_of(p, vin[k]));
    }
    for (int k = 0; k < n->nout; k++) {
      const pval *x = &p->vals[vout[k]];
      ts_tensor_view(&out[k], x->dtype, x->shape, data_of(p, vout[k]));
    }
    if (p->nhooks) {
      ev = (ts_hook_info){TS_HOOK_NODE_BEGIN, g, i, p->opname[i], n->name, step, 0, 0};
      emit(p, &ev);
    }
    if (timed) rc = ts__dev_event_record(p->dev, p->tev[1 + 2 * i], NULL); /* (a failure ends the run below) */
    if (p->fuse_out[i] >= 0 && fast) { /* matmul writing its cast's f32 result */
      const int w = p->fuse_out[i], j = p->vals[w].producer;
      ts_tensor_view(&out[0], TS_F32, p->vals[w].shape, data_of(p, w));
      p->fuse_done[j] = 1;
      p->ntaken[TS_FUSION_MATMUL_CAST]++;
    }
    ts__fuse fz;
    ctx.fuse = NULL;
    if (gpu) ctx.flag = p->dflags + i;
    ctx.cl_in = ctx.cl_out = 0;
    for (int k = 0; p->ncl && k < n->nin; k++) ctx.cl_in |= (unsigned)p->cl[vin[k]] << k;
    for (int k = 0; p->ncl && k < n->nout; k++) ctx.cl_out |= (unsigned)p->cl[vout[k]] << k;
    int skip = 0;
    switch (p->fz_role[i]) {
      case FZ_BN: /* writes relu(bn(x)) into the relu's output */
        p->fz_valid[i] = (char)fast;
        if (fast) {
          const int j = p->fz_peer[i], y = node_out(p, j)[0];
          ts_tensor_view(&out[0], p->vals[y].dtype, p->vals[y].shape, data_of(p, y));
          fz = (ts__fuse){TS__FUSE_BN_RELU, ts_attr_eltwise_alpha(&p->nodes[j].a), p->fz_ab[i], 0};
          ctx.fuse = &fz;
          p->fuse_done[j] = 1;
          p->ntaken[TS_FUSION_BN_RELU]++;
        }
        break;
      case FZ_RELU: /* its result is there */
      case FZ_GELU:
        skip = p->fuse_done[i];
        p->fuse_done[i] = 0;
        break;
      case FZ_MM_GELU: /* writes gelu(x w + b) into the gelu's output */
        if (fast) {
          const int j = p->fz_peer[i], y = node_out(p, j)[0], c = p->vals[node_in(p, j)[0]].producer;
          ts_tensor_view(&out[0], p->vals[y].dtype, p->vals[y].shape, data_of(p, y));
          fz = (ts__fuse){TS__FUSE_MM_GELU, 0.0f, NULL, (int)ts_attr_eltwise_alg(&p->nodes[j].a)};
          ctx.fuse = &fz;
          p->fuse_done[j] = 1;
          if (c != i) p->fuse_done[c] = 1; /* O1: the widening cast between them */
          p->ntaken[TS_FUSION_MATMUL_BIAS_GELU]++;
        }
        break;
      case FZ_RELU_BWD: /* its BATCHNORM_BWD reads dy itself, if the forward ran fused */
        if (fast && p->fz_valid[p->fz_peer[p->fz_peer[i]]]) skip = 1, p->fuse_done[p->fz_peer[i]] = 1;
        break;
      case FZ_BN_BWD:
        if (p->fuse_done[i]) {
          const int e = p->vals[vin[0]].producer, dy = node_in(p, e)[0], bn = p->fz_peer[i];
          ts_tensor_view(&in[0], p->vals[dy].dtype, p->vals[dy].shape, data_of(p, dy));
          fz = (ts__fuse){TS__FUSE_BN_RELU_BWD, ts_attr_eltwise_alpha(&p->nodes[p->fz_peer[bn]].a), p->fz_ab[bn], 0};
          ctx.fuse = &fz;
          p->fuse_done[i] = 0;
          p->ntaken[TS_FUSION_BN_RELU_BWD]++;
        }
        break;
      default:
        break;
    }
    if (rc != TS_OK) { /* the node's start event was not recorded: it does not run */
    } else if (skip || (p->fuse_done[i] && n->op == TS_OP_CAST)) /* that cast or relu: its result is there */
      p->fuse_done[i] = 0, rc = TS_OK;
    else
      rc = tab[n->op](&ctx, n, in, out);
    if (timed && !rc) rc = ts__dev_event_record(p->dev, p->tev[2 + 2 * i], NULL);
    if (p->nhooks) {
      ev.event = TS_HOOK_NODE_END;
      emit(p, &ev);
    }
    if (rc != TS_OK) {
      rc = ts_error_wrap(rc, "node %s (%s)", n->name, p->opname[i]);
      break;
    }
  }
  if (rc != TS_OK) memset(p->fuse_done, 0, (size_t)p->nnodes); /* a failed run leaves no cast skipped */
  if (gpu && rc == TS_OK) rc = gpu_flags(p, &ctx); /* the run's one synchronisation */
  if (timed && rc == TS_OK && p->nhooks) rc = emit_timed(p, g, step, first, end, t_host0);
  if (p->nhooks) {
    ev = (ts_hook_info){TS_HOOK_RUN_END, g, -1, NULL, NULL, step, 0, 0};
    emit(p, &ev);
  }
  return rc;
}
