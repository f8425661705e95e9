/* Internal: the device state of a job training on GPUs (dist_device.c), shared with the files that
 * run a sync object's reduction there (dist_device_zero.c: optimizer-state sharding). Only the
 * distribution layer's device files include it. */
#ifndef TS_DIST_DEVICE_H
#define TS_DIST_DEVICE_H

#include "dist_impl.h"
#include "device/dev.h"
#include "runtime/dcoll.h"

struct ts__dist_dev {
  ts__dev *dev;
  ts__dcoll *coll;         /* the collectives over the world on device buffers (grp[0]) */
  /* device collectives over every group of ranks the job's collectives use, the world's first:
   * one object per group, shared by the plans' slots and the gradients' groups over the same
   * ranks (ranks: the members' world ranks; own: a communicator made here for it) */
  struct ts__dgrp {
    ts__dcoll *x;
    ts_comm *c, *own; /* the communicator it was made over; own: made for it */
    int *ranks, n;
  } *grp;
  int ngrp;
  /* the gradients' reduction: ranges of the flat gradients, each all-reduced over the group of
   * the ranks holding the same slice (grp index); with overlap (data_parallel through NCCL, one
   * micro-batch) about bucket_size_mb each, issued on a stream of their own as backward
   * completes them and waited for at the step's end; else in the store's order after backward */
  struct ts__gbucket {
    size_t off, n;
    int ready; /* the node after which it is complete (-1: none writes it: issued at the end) */
    int grp;
  } *bk;
  int nbk, next_bk, async_rc, overlap;
  /* with overlap: the buckets' device collectives, over a communicator of their own (a copy of
   * their group's), so that no other collective of the step shares them from another stream */
  ts__dcoll *bkx;
  ts_comm *bkc;
  ts__dev_stream *comm_s;
  ts__dev_event *ev_node, *ev_comm;
  /* clipping with sliced parameters (or a pipeline's): ranges of the flat gradients, each
   * weighted, their sums of squares (device, and copied out) */
  struct ts__crange {
    size_t off, n;
    float w; /* its weight in the global norm: 1 / its holders (a pipeline's: 0 where another stage counts it) */
  } *cr;
  int ncr;
  float *cres, *cres_h;
  /* optimizer_shard (dist_device_zero.c): each ZeRO group's three device collectives (grp indices
   * 3k: its shard group's, 3k + 1: across the shard groups or -1, 3k + 2: all its ranks'), the
   * reduced gradients in the CPU's work buffer layout (stage 1: R, the parts in place; staged:
   * R + P), a bucket padded to the group's equal parts and one part (zpad), clipping's sums (one
   * per part, then per replicated piece) */
  int *zgrp;
  float *zwg, *zpad, *zres, *zres_h;
  /* optimizer_shard 2 (staged): the buckets' staging slots on the device (per group, its slots from
   * zslot[zslot0[group]]), the replicated gradients of a micro-step (zrg, with accumulation), the
   * buckets in the order they are reduce-scattered (by the node completing them) and this run's
   * next one; zacc: this micro-step's reduced parts are added to the rank's (k > 0) */
  float **zslot, *zrg;
  int *zslot0, nzslot;
  struct ts__zbk {
    int k, last;
  } *zord;
  int nzord, znext, zacc, zrc;
  /* optimizer_shard 3: the rank's parameters (wp: R + P), the gather slots on the device, each
   * plan's gathers in the order they are due (training, evaluation: a hook each) */
  float *zwp, **zgslot;
  int nzgslot;
  struct ts__zgat {
    ts_dist *d;
    ts_plan *plan;
    int next, rc;
  } zgat[2];
  /* the pipeline layout (dist_device_pipe.c): the device collectives (grp index, -1: none) of the
   * stage's replicas and of the pipeline (its tied parameters' gradients summed in `tied`) */
  int pdp, ppg;
  float *tied;
  /* host ranges the plans bind besides the store's (optimizer_shard 2: the staging slots, the work
   * buffer, the replicated micro-step gradients) and their device copies */
  struct ts__dmir {
    const char *h;
    size_t n;
    char *d;
  } *mir;
  int nmir;
  /* the store's buffers: parameters, gradients, states (host base, bytes, device copy) */
  const char *hbase[3];
  size_t hlen[3];
  char *dbase[3];
  float *acc;              /* accumulated gradients (accum > 1) */
  void *x, *y, *xe;        /* the inputs of a micro-step and of an evaluation batch */
  size_t xs, ys, xes;
  /* evaluation: the batch's labels and each row's statistics on the device (ts__gpu_eval_rows),
   * the statistics copied out (pinned), made at the first evaluation on the rank holding the
   * logits; an evaluation batch's nlogits logits (rows of eC) are copied out for predictions and
   * where the classes exceed that kernel's bound (logits, pinned, made at first use; else NULL) */
  int32_t *elab;
  float *est, *est_h;
  float *logits;
  size_t nlogits;
  int64_t eC;
  float *scratch;          /* partial sums (clipping) and the results (2 floats) */
  size_t nscratch;
  float *slots[2];         /* the optimizer's state on the device */
  float *lamb_u, *lamb_part, *lamb_sq; /* LAMB: a segment's direction, sums' partials, sums (2 a segment) */
  /* LAMB whose norms are summed over ranks (sliced parameters, optimizer shards: the optimizer's
   * norm reduction): every segment's direction kept (lamb_u over the whole extent), the update in
   * two phases around the reduction (lamb_phase 1: directions and sums, 2: the updates; 0: both) */
  int lamb_all, lamb_phase, lamb_nseg;
  double *lamb_h;
  ts_optim_segment *segs;  /* its segments (offsets into the flat buffers) */
  int nseg;
  void *mch; /* SGD/momentum/Adam(W): every segment's chunks (ts__gpu_mchunk, device), one launch a step */
  int64_t nmch; /* their count; -1: TESSERA_GPU_OPTIM_SEGMENTS asked for the per-segment kernels */
  int host_stale;          /* the host copies are older than the device's */
};

#define G(d) ((d)->gpu)

/* bytes (at least 64) of zeroed device memory */
int ts__dist_dev_alloc0(ts__dev *v, size_t bytes, void **p);
/* The index in g->grp of the device collectives over c's ranks, made now or found (collective over
 * c; own: c made for it, kept or freed; made: an object already created over c). */
int ts__dist_dev_group(struct ts__dist_dev *g, ts_comm *c, int own, ts__dcoll *made, int backend, int *idx);
/* One optimizer update of n elements: parameters p, gradients gr (device), the state at offset w
 * of the device slots, segment sg's flags, learning rate and decay, LAMB's sums at lamb_sq + 2 * seg
 * (dist_device.c). */
int ts__dist_dev_update(ts_dist *d, ts_optim *o, float *p, const float *gr, size_t w, int64_t n, const ts_optim_segment *sg, int seg,
                        float lr);

/* Plan p of graph gr on the device: the store's bindings moved onto its device copy (and the
 * mirrors'). */
int ts__dist_dev_put_plan(ts_dist *d, ts_plan *p, const ts_graph *gr);

/* The gradients' reduction over base's N ranks (this one R; no overlap): the trainable parameters
 * by the partition of those ranks into the ones holding the same slice, each group's ranges
 * all-reduced through its device collectives after backward (g->bk; a pipeline stage's). */
int ts__dist_dev_reduce_plan(ts_dist *d, ts_comm *base, int N, int R);

/* The pipeline layout on the devices (dist_device_pipe.c): what does not run there yet refused;
 * bind (after the store's copy: the plans, the stages' collectives, the reduction's groups over
 * the stage's ranks, clipping's weights), start (the parameters' broadcast over the stage's
 * replicas), a step's schedule, the reduction's ends (before: the step's sends completed; after
 * the stage's groups: the tied gradients summed over the pipeline), evaluation, BatchNorm's running
 * statistics averaged over the replicas; the stage's ranks (messages). */
int ts__dist_dev_pipe_check(const ts_dist_config *cfg);
int ts__dist_dev_pipe_bind(ts_dist *d);
int ts__dist_dev_pipe_start(ts_dist *d);
int ts__dist_dev_pipe_fwd_bwd(ts_dist *d, const void *x, const void *y, int64_t step, double *loss, float **gout);
int ts__dist_dev_pipe_flush(ts_dist *d);
int ts__dist_dev_pipe_tied(ts_dist *d, float *gd);
int ts__dist_dev_pipe_stage_ranks(const ts_dist *d);
int ts__dist_dev_pipe_eval(ts_dist *d, const void *x, const ts__eval_out *o);
/* An evaluation batch's result from its logits lg on the device (rows of g->eC), as o asks:
 * rows: a kernel per row, 16 bytes a row copied out, finished on the host (ts__eval_rows_finish;
 * beyond the kernel's classes, the logits copied out and evaluated there, ts__eval_rows_ref);
 * logits: copied out into host (nlogits floats; NULL: into g->logits, pinned, made at first use)
 * and *o->logits pointed at them. */
int ts__dist_dev_eval_out(ts_dist *d, const float *lg, const ts__eval_out *o, float *host);
int ts__dist_dev_pipe_sync_states(ts_dist *d);
/* the pieces' plans freed (device memory) but d->r's, which the caller frees last (the scratch's owner) */
void ts__dist_dev_pipe_free_plans(ts_dist *d);

/* LAMB's norms (2 floats a segment, nseg segments) summed over the ranks between its two phases,
 * through the optimizer's norm reduction. */
int ts__dist_dev_lamb_reduce(ts_dist *d, ts_optim *o, int nseg);

/* optimizer_shard 1 on the devices (dist_device_zero.c), after the CPU object planned its layout
 * (zero_impl.h): bind (the groups' collectives, buffers), the step's reduction (buckets
 * reduce-scattered, replicated gradients all-reduced), clipping over the parts, the update of the
 * rank's parts and replicated parameters, then every bucket all-gathered. */
int ts__dist_dev_zero_bind(ts_dist *d);
/* optimizer_shard 2, before the plans are put on the device: the staging slots, the work buffer and
 * the micro-step's replicated gradients allocated there, as mirrors of the host's (bound through
 * them). */
int ts__dist_dev_zero_mirror(ts_dist *d);
/* optimizer_shard 2, around each micro-step's run (micro-step k): before, whether the reduced parts
 * replace or are added to the rank's; after, the buckets the run left reduce-scattered and (with
 * accumulation) the replicated gradients added up; the hook's failure reported. */
void ts__dist_dev_zero_before(ts_dist *d, int64_t k);
/* optimizer_shard 3: the status of the last run of the training (0) or evaluation (1) plan's
 * gathers. */
int ts__dist_dev_zero_gathered(ts_dist *d, int which);
/* Where the reduced gradient of the parameter at store offset flat (numel elements) is on the
 * device, elements [*lo, *lo + *n) of it (the rank's part, or a replicated one's whole); NULL when
 * the sharding has no such parameter (zero_reduced_at's, for a pipeline's tied parameters). */
float *ts__dist_dev_zero_reduced_at(ts_dist *d, float *gd, size_t flat, size_t numel, size_t *lo, size_t *n);
/* optimizer_shard 3: the rank's parameters (the work layout) copied to the host's wp (to_host) or
 * from it. */
int ts__dist_dev_zero_move(ts_dist *d, int to_host);
int ts__dist_dev_zero_after(ts_dist *d, int64_t k);
int ts__dist_dev_zero_reduce(ts_dist *d, float *gd);
int ts__dist_dev_zero_clip(ts_dist *d, float *gd, ts__clip *c);
int ts__dist_dev_zero_step(ts_dist *d, ts_optim *o, const float *gd, float lr);
void ts__dist_dev_zero_free(struct ts__dist_dev *g);

#endif
