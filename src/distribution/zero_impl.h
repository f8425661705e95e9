/* Internal: optimizer-state sharding's state (dist_zero.c; the mixed-precision variant of stages
 * 1 and 2 in dist_zero16.c). See dist_zero.c's head for the layout. */
#ifndef TS_DIST_ZERO_IMPL_H
#define TS_DIST_ZERO_IMPL_H

#include <stdint.h>

#include "buckets.h"
#include "dist_impl.h"
#include "gather.h"

typedef struct {
  size_t flat;   /* offset in the store's flat buffers */
  size_t n;      /* elements */
  size_t packed; /* offset in [0, R) */
  int grp;       /* the group all-reducing it; -1: no other rank holds this slice */
  float cw;      /* its weight in the global norm (1 / its holders; under a pipeline, 0 where another
                    stage counts it) */
  float lw;      /* LAMB: its norms' weight, 1 / the base ranks holding it */
} piece;

/* This rank's part of one bucket */
typedef struct {
  size_t flat;          /* the bucket's offset in the flat buffers */
  size_t len;           /* the bucket's elements */
  const size_t *counts; /* the group's ranks' parts */
  size_t lo, n;         /* this rank's part: flat + lo .. flat + lo + n */
  size_t work;          /* its offset in the work buffer (R + out_off) */
  int grp;
  float cw;             /* its weight in the global norm: 1, or 0 for a pipeline's tied parameter on a
                           stage that does not count it */
} part;

/* The ranks holding the same slices: a communicator, its buckets, this rank's place */
typedef struct {
  ts_comm *comm;   /* NULL in dry runs; the replicated gradients are all-reduced over it */
  int owned;       /* split for the group (else the base communicator) */
  int N, rank;     /* the shard group's ranks and this rank's place in it (the whole group's
                      without parallel.optimizer_shard_group) */
  int NF, X;       /* the group's ranks; its shard groups (NF = N * X) */
  ts_comm *scomm;  /* the shard group's ranks: buckets reduce-scattered and all-gathered (comm if X == 1) */
  ts_comm *xcomm;  /* X > 1: the ranks at the same place of every shard group; parts all-reduced */
  int sowned;
  ts_comm *rcomm;  /* parallel.reduce_scatter ring: a dup of scomm for the rings (NULL: MPI's) */
  ts__buckets *bk; /* without a communicator in dry runs (the layout only) */
  int nb, first;   /* its buckets: pt[first .. first + nb) */
  size_t S, P;     /* its sharded elements, this rank's parts of them */
  size_t out;      /* its parts in the work buffer: R + out .. R + out + P */
  size_t rlo, rn;  /* its replicated elements: [rlo, rlo + rn) of the work buffer */
} zgroup;

struct ts__zero {
  int N, rank;     /* the base ranks and this rank's place */
  char note[512];  /* how the buckets are reduce-scattered, where it is the ring (the start line) */
  ts_comm *base;   /* the job's world, or the pipeline stage's communicator (NULL: dry run) */
  int plain;       /* data_parallel: one group of every rank, every replicated parameter on all */
  size_t S, P, R;  /* sharded elements (of the rank's groups), this rank's parts, replicated elements */
  int nrep, nb, ng;
  piece *rep;
  part *pt;
  zgroup *g;       /* ng groups (room for gcap) */
  int gcap;
  int attached;
  int stage3;      /* the parameters live in wp (optimizer_shard 3) */
  ts__gather *gt;  /* stage 3: the gathers into the plans' slots */
  ts_comm *gcomm;  /* stage 3: the gathers' own communicator (a duplicate of the world) */
  size_t *rep_at;  /* stage 3: per parameter id, its offset in [0, R) if replicated, else SIZE_MAX */
  int accumulated; /* stage 2: this step's gradients are already reduced into the work buffer */
  int inplace;     /* stage 1: the reduced parts in place in the gradient buffer; wg holds R */
  int staged;      /* stages 2 and 3: no whole-model gradient buffer; the buckets' staging slots */
  size_t stage_numel; /* the slots' floats (with accumulation, their reduced parts too) */
  size_t wire_numel;  /* parallel.comm_dtype bf16/f16: the buckets' 16-bit wire slots' elements */
  float *rg;       /* staged with accumulation: R, the replicated gradients of a micro-step (else
                      backward writes them into wg directly) */
  ts_plan **hooked; /* the plans zero_hook is attached to */
  int nhooked;
  size_t *displs;  /* N: scratch for the all-gathers */
  float *wp;       /* stage 3: R + P, the rank's parameters (replicated, then its parts) */
  float *wg;       /* the reduced gradients: the replicated ones [0, R), then (stages 2, 3) the parts */
  float **sp;      /* nsp: the optimizer's segments' parameters and gradients, per step */
  const float **sg;
  int nsp;
  ts_prof *prof;   /* profiling: the buckets' all-gathers after the update recorded (zero_set_prof) */
  char **agname, **agargs; /* nb: their spans' names and args */
  /* Prefetch (stages 1, 2 under data_parallel with parallel.overlap): the all-gathers after the
   * update run non-blocking, in the order the next forward reads the buckets, and that forward
   * waits for each bucket before the first node reading it (zero_hook); anything else reading the
   * parameters first waits for them all (zero_settle: the store's settle hook, the evaluation
   * and checkpoint paths, the next update). */
  int prefetch;
  int rs_hook;           /* the buckets' reduce-scatters run from the hook (overlap, or staged) */
  const ts_graph *pg;    /* the training plan's graph */
  int pnodes;
  int *rd_start, *rd;    /* CSR: node -> the buckets it is the first live reader of */
  int *ag_order;         /* nb: the buckets by their first reader */
  ts_comm_req **agreq;   /* nb: in flight */
  ts_comm_ring_req **agring; /* nb: in flight, gathered by the ring (the group's rcomm) */
  double *ag_t0;         /* nb: issued at (profiling) */
  size_t *agdispl;       /* nb x N: the parts' displacements, per bucket */
  int ag_pending;        /* some all-gather is in flight */
  int ag_err;            /* a failure seen by the hook or the settle hook, reported next */
  char ag_msg[512];
  double ag_wait_s;      /* seconds spent waiting for them since the last reduction */
  ts_params *settle_p;   /* the store whose settle hook is armed (NULL: none) */
  /* Mixed precision (parallel.optimizer_shard_weights, stages 1 and 2; dist_zero16.c): the plans'
   * weights and gradients in `low` (bf16/f16), the rank's f32 master weights in wp (R + P, as
   * stage 3's parameters), the store holding neither */
  ts_dtype low;          /* TS_F32: off */
  uint16_t *w16;         /* the whole model's 16-bit weights (the store's flat layout): the plans read them */
  uint16_t *g16;         /* stage 1: the whole 16-bit gradients (the parts reduce-scattered in place) */
  uint16_t *p16;         /* stage 2: the rank's reduced 16-bit parts (P, laid out as wg's parts) */
  uint16_t *r16;         /* stage 2: the replicated parameters' 16-bit gradients (R) */
  size_t numel;          /* the store's parameter elements (w16's, g16's) */
  float gscale;          /* the factor clipping left for the update (1 / the loss scale x the clip) */
  float **mp;            /* nsp: the optimizer's segments' master weights and 16-bit gradients, per step */
  const void **mg;
  ts_dtype *mdt;
};

/* The object's sharding state: NULL before it is planned (or under another sync implementation). */
static inline struct ts__zero *ts__zof(const ts_dist *d) {
  return d->sync.vt == &ts__sync_zero ? (struct ts__zero *)d->sync.priv : NULL;
}
#define zof ts__zof

/* Where group k's buckets write the rank's reduced parts: in place (stage 1: NULL) or wg. */
static inline float *ts__zero_out(struct ts__zero *z, int k) { return z->inplace ? NULL : z->wg + z->R + z->g[k].out; }
#define zero_out ts__zero_out

/* The rank's reduced gradient of its part of bucket k: in place in g (stage 1), or in wg. */
static inline float *ts__part_grad(const struct ts__zero *z, const float *g, int k) {
  return z->inplace ? (float *)g + z->pt[k].flat + z->pt[k].lo : z->wg + z->pt[k].work;
}
#define part_grad ts__part_grad

/* Mixed precision: the rank's reduced 16-bit part of bucket k (stage 1 in place in g16, stage 2
 * in p16, laid out as wg's parts). */
static inline uint16_t *ts__part16(const struct ts__zero *z, int k) {
  return z->p16 ? z->p16 + (z->pt[k].work - z->R) : z->g16 + z->pt[k].flat + z->pt[k].lo;
}

/* The rank's f32 parameters in wp (stage 3's, mixed precision's masters) initialised from the
 * counter-based RNG at their global positions; builds z->rep_at (dist_zero.c). */
int ts__zero_init_shard(ts_dist *d, struct ts__zero *z);

/* ---- the mixed-precision variant (dist_zero16.c) ---- */

/* ts__zero16_dtype: dist_impl.h */
/* After the groups and buckets are planned (z->low set): the 16-bit buffers, the master weights
 * initialised, the plans' parameter and gradient values bound (also dry: the binding shapes the
 * plans). */
int ts__zero16_plan(ts_dist *d, struct ts__zero *z);
/* After the reduce-scatters: the replicated 16-bit gradients widened into wg. */
void ts__zero16_widen_rep(struct ts__zero *z);
/* The global norm's squares of the rank's parts (16-bit; each weighted by 1). */
double ts__zero16_part_squares(const struct ts__zero *z);
/* The update of the master weights from the 16-bit parts (x z->gscale), rounded into w16, then
 * all-gathered in 16 bits (prefetched or blocking). */
int ts__zero16_step(ts_dist *d, struct ts__zero *z, ts_optim *opt, float lr);
/* After the master weights were written (a checkpoint loaded): w16 refilled from them (collective). */
int ts__zero16_refill(ts_dist *d, struct ts__zero *z);
void ts__zero16_free(struct ts__zero *z);

#endif
