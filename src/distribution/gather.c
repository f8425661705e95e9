/* ZeRO-3 parameter gathers (gather.h): units of sharded parameters all-gathered into a few slots
 * just before the nodes that read them, the next one prefetched while the current one is read.
 * MPI progresses non-blocking collectives only inside MPI calls, so the hook polls the gathers in
 * flight after every node. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/exec.h"
#include "graph/graph_ir.h"
#include "gather.h"

#define MAX_PLANS 4
#define SHARED_SLOTS 2 /* slots the units take in turn: one read, the next one gathered */

typedef struct {
  int node;  /* the first node that reads the unit after this gather (waits for it) */
  int unit;
  int after; /* the last node reading the slot's previous unit (-1: empty): starts once it has run */
} gather_op;

typedef struct {
  struct ts__gather *gt;
  const ts_graph *g;
  ts_plan *plan;
  int nnodes;
  int *need_start, *need; /* CSR: node -> the units it reads (nodes that run only) */
  gather_op *op;
  int nop;
  ts_comm_req **req; /* per op, while in flight */
  int next_start, next_wait, running;
  size_t run_numel;
} plan_sched;

struct ts__gather {
  ts_comm *comm;
  int N;
  const ts_params *p;
  int nu;
  ts__gather_unit *u;
  int np;
  int *unit_of; /* per parameter id: its unit, -1 none */
  int *slot;    /* per unit */
  int nslots, dedicated;
  size_t *slot_len;
  float **buf; /* per slot (with a communicator) */
  int nplans;
  plan_sched pl[MAX_PLANS];
  const float *src;
  int err;
  char errmsg[512];
  double wait_s;
};

static void hook(const ts_hook_info *e, void *user);

static void free_sched(plan_sched *s) {
  free(s->need_start);
  free(s->need);
  free(s->op);
  if (s->req)
    for (int i = 0; i < s->nop; i++) ts_comm_req_free(s->req[i]);
  free(s->req);
}

void ts__gather_free(ts__gather *gt) {
  if (!gt) return;
  for (int k = 0; k < gt->nplans; k++) {
    if (gt->src) ts_plan_remove_hook(gt->pl[k].plan, hook, &gt->pl[k]); /* the plans outlive it */
    free_sched(&gt->pl[k]);
  }
  for (int s = 0; gt->buf && s < gt->nslots; s++) ts_free(gt->buf[s]);
  free(gt->buf);
  free(gt->slot_len);
  free(gt->slot);
  free(gt->unit_of);
  free(gt->u);
  free(gt);
}

int ts__gather_create(ts_comm *comm, int N, const ts_params *p, const ts__gather_unit *units, int nunits,
                      ts__gather **out) {
  *out = NULL;
  ts__gather *gt = calloc(1, sizeof *gt);
  int np = ts_params_count(p);
  if (!gt || !(gt->u = calloc((size_t)nunits + 1, sizeof *gt->u)) ||
      !(gt->unit_of = malloc(sizeof(int) * ((size_t)np + 1))) || !(gt->slot = calloc((size_t)nunits + 1, sizeof(int)))) {
    ts__gather_free(gt);
    return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard 3: out of memory");
  }
  gt->comm = comm;
  gt->N = N;
  gt->p = p;
  gt->nu = nunits;
  gt->np = np;
  memcpy(gt->u, units, sizeof *units * (size_t)nunits);
  for (int i = 0; i < np; i++) {
    gt->unit_of[i] = -1;
    if (ts_params_flags(p, i) & TS_PARAM_STATE) continue;
    ts_shape s = ts_params_shape(p, i);
    size_t o = ts_params_offset(p, i), n = (size_t)ts_shape_numel(&s);
    for (int k = 0; k < nunits; k++)
      if (o >= units[k].off && o + n <= units[k].off + units[k].len) gt->unit_of[i] = k;
  }
  *out = gt;
  return TS_OK;
}

/* The units node n reads (its inputs and outputs, views followed to the parameter they show). */
static int add_needs(ts__gather *gt, plan_sched *s, int n, int *cap) {
  const ts_graph *g = s->g;
  int nin = ts_graph_node_num_inputs(g, n), nout = ts_graph_node_num_outputs(g, n);
  for (int k = 0; k < nin + nout; k++) {
    int v = k < nin ? ts_graph_node_input(g, n, k) : ts_graph_node_output(g, n, k - nin);
    for (int a; (a = ts_graph_value_alias_of(g, v)) >= 0;) v = a;
    if (ts_graph_value_kind(g, v) != TS_VAL_PARAM) continue;
    int id = ts_graph_value_param_id(g, v);
    int u = id >= 0 && id < gt->np ? gt->unit_of[id] : -1;
    if (u < 0) continue;
    int dup = 0;
    for (int j = s->need_start[n]; j < s->need_start[n + 1]; j++) dup |= s->need[j] == u;
    if (dup) continue;
    if (s->need_start[n + 1] == *cap) {
      int nc = *cap ? 2 * *cap : 256;
      int *q = realloc(s->need, sizeof(int) * (size_t)nc);
      if (!q) return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard 3: out of memory");
      s->need = q;
      *cap = nc;
    }
    s->need[s->need_start[n + 1]++] = u;
  }
  return TS_OK;
}

int ts__gather_add_plan(ts__gather *gt, const ts_graph *g, ts_plan *plan) {
  if (gt->nplans == MAX_PLANS) return ts_error_set(TS_ERANGE, "parallel.optimizer_shard 3: at most %d plans", MAX_PLANS);
  plan_sched *s = &gt->pl[gt->nplans];
  memset(s, 0, sizeof *s);
  s->gt = gt;
  s->g = g;
  s->plan = plan;
  s->nnodes = ts_graph_num_nodes(g);
  if (!(s->need_start = calloc((size_t)s->nnodes + 1, sizeof(int))))
    return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard 3: out of memory");
  gt->nplans++; /* freed with the object from here on */
  int cap = 0;
  for (int n = 0; n < s->nnodes; n++) {
    s->need_start[n + 1] = s->need_start[n];
    int live = ts_plan_node_live(plan, n);
    if (live < 0) return ts_error_wrap(live, "parallel.optimizer_shard 3: planning");
    int rc = live ? add_needs(gt, s, n, &cap) : TS_OK;
    if (rc) return rc;
  }
  return TS_OK;
}

/* The gathers of plan s under the current slots; *c1 and *c2 get two units of one slot that a node
 * reads together (returns 1), or the list is complete (returns 0). */
static int simulate(ts__gather *gt, plan_sched *s, int *c1, int *c2) {
  int *res = malloc(sizeof(int) * ((size_t)gt->nslots + 1)), *last = malloc(sizeof(int) * ((size_t)gt->nslots + 1));
  int total = s->need_start[s->nnodes];
  free(s->op);
  s->op = malloc(sizeof *s->op * ((size_t)total + 1));
  s->nop = 0;
  s->run_numel = 0;
  if (!res || !last || !s->op) {
    free(res);
    free(last);
    return -1;
  }
  for (int k = 0; k < gt->nslots; k++) res[k] = last[k] = -1;
  int conflict = 0;
  for (int n = 0; n < s->nnodes && !conflict; n++) {
    const int *nd = s->need + s->need_start[n];
    int m = s->need_start[n + 1] - s->need_start[n];
    for (int a = 0; a < m && !conflict; a++)
      for (int b = a + 1; b < m && !conflict; b++)
        if (gt->slot[nd[a]] == gt->slot[nd[b]]) {
          *c1 = nd[a];
          *c2 = nd[b];
          conflict = 1;
        }
    for (int a = 0; a < m && !conflict; a++) {
      int u = nd[a], sl = gt->slot[u];
      if (res[sl] != u) {
        s->op[s->nop++] = (gather_op){n, u, last[sl]};
        s->run_numel += gt->u[u].len;
        res[sl] = u;
      }
      last[sl] = n;
    }
  }
  free(res);
  free(last);
  return conflict;
}

int ts__gather_layout(ts__gather *gt) {
  gt->nslots = gt->nu < SHARED_SLOTS ? gt->nu : SHARED_SLOTS;
  for (int u = 0; u < gt->nu; u++) gt->slot[u] = u % SHARED_SLOTS;
  /* two units of one shared slot read by one node: the smaller gets a slot of its own */
  for (int again = 1; again;) {
    again = 0;
    for (int k = 0; k < gt->nplans && !again; k++) {
      int c1 = -1, c2 = -1, r = simulate(gt, &gt->pl[k], &c1, &c2);
      if (r < 0) return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard 3: out of memory");
      if (r) {
        int v = gt->u[c2].len < gt->u[c1].len ? c2 : c1;
        gt->slot[v] = gt->nslots++;
        gt->dedicated++;
        again = 1;
      }
    }
  }
  if (!(gt->slot_len = calloc((size_t)gt->nslots + 1, sizeof(size_t))))
    return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard 3: out of memory");
  for (int u = 0; u < gt->nu; u++)
    if (gt->u[u].len > gt->slot_len[gt->slot[u]]) gt->slot_len[gt->slot[u]] = gt->u[u].len;
  for (int k = 0; k < gt->nplans; k++)
    if (!(gt->pl[k].req = calloc((size_t)gt->pl[k].nop + 1, sizeof(ts_comm_req *))))
      return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard 3: out of memory");
  if (!gt->comm) return TS_OK;
  if (!(gt->buf = calloc((size_t)gt->nslots + 1, sizeof(float *))))
    return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard 3: out of memory");
  for (int s = 0; s < gt->nslots; s++)
    if (!(gt->buf[s] = ts_calloc(sizeof(float) * (gt->slot_len[s] ? gt->slot_len[s] : 1))))
      return ts_error_set(TS_ENOMEM, "parallel.optimizer_shard 3: cannot allocate a gather slot of %zu floats",
                          gt->slot_len[s]);
  return TS_OK;
}

float *ts__gather_addr(ts__gather *gt, int id) {
  if (!gt->buf || id < 0 || id >= gt->np || gt->unit_of[id] < 0) return NULL;
  int u = gt->unit_of[id];
  return gt->buf[gt->slot[u]] + (ts_params_offset(gt->p, id) - gt->u[u].off);
}

/* A gather failed: the message kept, every slot poisoned, no more gathers this run. */
static void fail(ts__gather *gt, plan_sched *s, const char *what, int unit) {
  if (!gt->err) {
    gt->err = TS_ECOMM;
    snprintf(gt->errmsg, sizeof gt->errmsg, "parallel.optimizer_shard 3: %s of parameter unit %d (%zu floats): %s",
             what, unit, gt->u[unit].len, ts_last_error());
  }
  for (int k = 0; k < gt->nslots; k++)
    for (size_t i = 0; i < gt->slot_len[k]; i++) gt->buf[k][i] = NAN;
  s->running = 0;
}

static void start_upto(plan_sched *s, int n) {
  ts__gather *gt = s->gt;
  while (s->running && s->next_start < s->nop && s->op[s->next_start].after < n) {
    const gather_op *o = &s->op[s->next_start];
    const ts__gather_unit *u = &gt->u[o->unit];
    if (ts_comm_iallgatherv(gt->comm, gt->src + u->src, gt->buf[gt->slot[o->unit]], u->counts, NULL, TS_F32,
                            &s->req[s->next_start])) {
      fail(gt, s, "starting the all-gather", o->unit);
      return;
    }
    s->next_start++;
  }
}

static void poll(plan_sched *s) {
  for (int i = s->next_wait; s->running && i < s->next_start; i++) {
    int done = 0;
    if (!s->req[i]) continue;
    if (ts_comm_test(s->req[i], &done)) {
      fail(s->gt, s, "the all-gather", s->op[i].unit);
      return;
    }
    if (done) {
      ts_comm_req_free(s->req[i]);
      s->req[i] = NULL;
    }
  }
}

/* Waits for the gathers node n needs (all_started: for every gather started, at the end of a run). */
static void wait_upto(plan_sched *s, int n, int all_started) {
  ts__gather *gt = s->gt;
  double t0 = ts_time_now();
  while (s->running && s->next_wait < s->nop && (all_started ? s->next_wait < s->next_start : s->op[s->next_wait].node <= n)) {
    if (s->next_wait == s->next_start) start_upto(s, s->op[s->next_wait].after + 1);
    if (!s->running) break;
    ts_comm_req **r = &s->req[s->next_wait];
    if (*r && ts_comm_wait(*r)) {
      fail(gt, s, "the all-gather", s->op[s->next_wait].unit);
      break;
    }
    ts_comm_req_free(*r);
    *r = NULL;
    s->next_wait++;
  }
  gt->wait_s += ts_time_now() - t0;
}

static void hook(const ts_hook_info *e, void *user) {
  plan_sched *s = user;
  switch (e->event) {
    case TS_HOOK_RUN_BEGIN: /* the shards may have changed since the last run: gather afresh */
      s->next_start = s->next_wait = 0;
      s->running = !s->gt->err;
      start_upto(s, 0);
      break;
    case TS_HOOK_NODE_BEGIN:
      start_upto(s, e->node);
      wait_upto(s, e->node, 0);
      poll(s);
      break;
    case TS_HOOK_NODE_END:
      poll(s);
      break;
    case TS_HOOK_RUN_END: /* nothing left in flight (a failed node ends the run early) */
      wait_upto(s, 0, 1);
      s->running = 0;
      break;
    case TS_HOOK_NODE_TIMED: /* the profiler's (a GPU's device times) */
      break;
  }
}

int ts__gather_attach(ts__gather *gt, const float *src) {
  if (!gt->buf) return ts_error_set(TS_EINVAL, "parallel.optimizer_shard 3: gathering needs the job's ranks");
  gt->src = src;
  for (int k = 0; k < gt->nplans; k++) {
    int rc = ts_plan_add_hook(gt->pl[k].plan, hook, &gt->pl[k]);
    if (rc) return rc;
  }
  return TS_OK;
}

void ts__gather_detach(ts__gather *gt) {
  for (int k = 0; gt->src && k < gt->nplans; k++) ts_plan_remove_hook(gt->pl[k].plan, hook, &gt->pl[k]);
  gt->src = NULL;
}

int ts__gather_op(const ts__gather *gt, const ts_plan *plan, int i, int *node, int *unit) {
  for (int k = 0; k < gt->nplans; k++)
    if (gt->pl[k].plan == plan) {
      if (i < 0 || i >= gt->pl[k].nop) return 0;
      *node = gt->pl[k].op[i].node, *unit = gt->pl[k].op[i].unit;
      return 1;
    }
  return 0;
}

const ts__gather_unit *ts__gather_unit_at(const ts__gather *gt, int u, int *slot) {
  if (u < 0 || u >= gt->nu) return NULL;
  *slot = gt->slot[u];
  return &gt->u[u];
}

int ts__gather_num_slots(const ts__gather *gt) { return gt->nslots; }

float *ts__gather_slot_buf(const ts__gather *gt, int q, size_t *numel) {
  *numel = gt->buf && q >= 0 && q < gt->nslots ? gt->slot_len[q] : 0;
  return *numel ? gt->buf[q] : NULL;
}

int ts__gather_status(const ts__gather *gt) {
  return gt->err ? ts_error_set(gt->err, "%s", gt->errmsg) : TS_OK;
}

size_t ts__gather_slot_numel(const ts__gather *gt, int *nslots, int *dedicated) {
  size_t t = 0;
  for (int s = 0; s < gt->nslots; s++) t += gt->slot_len[s];
  if (nslots) *nslots = gt->nslots;
  if (dedicated) *dedicated = gt->dedicated;
  return t;
}

size_t ts__gather_run_numel(const ts__gather *gt, int k, int *ngathers) {
  if (k < 0 || k >= gt->nplans) return 0;
  if (ngathers) *ngathers = gt->pl[k].nop;
  return gt->pl[k].run_numel;
}

double ts__gather_take_wait(ts__gather *gt) {
  double w = gt->wait_s;
  gt->wait_s = 0;
  return w;
}
