/* Internal: gradient synchronisation across replicas as one interface. A distribution object
 * holds one sync object (ts_dist.sync); every layout composes with it: the layout builds the
 * rank's graphs, store and plans and says which ranks hold the same parameters (and whether
 * their gradients are averaged), the sync object reduces those gradients, steps the optimizer
 * over what the rank holds, and moves optimizer slots to and from whole stores. The shared code
 * (dist.c, dist_whole.c, dist_memory.c, dist_ckpt.c) calls the vtable, never an implementation.
 *
 * Implementations:
 *   ts__sync_allreduce  bucketed all-reduce of every gradient several ranks hold, overlapped with
 *                       backward (sync_allreduce.c over grad_reducer.c / buckets.c); the optimizer
 *                       over the whole store;
 *   ts__sync_zero       optimizer-state sharding, ZeRO stages 1, 2 and 3 (dist_zero.c, its
 *                       parameter gathers in gather.c): reduce-scatter into the rank's part, the
 *                       optimizer over it, all-gather (or stage 3's gathers before use).
 * ts__sync_choose picks one from the configuration (the ZeRO implementation reads its key). */
#ifndef TS_DIST_SYNC_H
#define TS_DIST_SYNC_H

#include <stdio.h>

#include "distribution/dist.h"

typedef struct ts__clip ts__clip;
typedef struct ts__sync_vt ts__sync_vt;

/* The sync object of a distribution object: its implementation, its state, and what the layout
 * told it. */
typedef struct ts__sync {
  const ts__sync_vt *vt;
  void *priv;  /* the implementation's state (NULL until planned / started) */
  int mean;    /* set by the layout: gradients averaged over the ranks holding them (else summed) */
  int overlap; /* set by start: reductions armed before backward and issued during it */
  struct ts__lamb *lamb; /* LAMB's norms summed over the pieces of parameters (dist_lamb.c; NULL) */
} ts__sync;

/* Every entry takes the distribution object; NULL entries are not allowed (each implementation
 * fills every one). */
struct ts__sync_vt {
  const char *name;
  /* After the layout built the rank's store and plans (dry runs too): the implementation's own
   * layout of the store (idempotent). */
  int (*plan)(ts_dist *d);
  /* How the layout allocates the rank's store: *no_grads: no whole-model gradient buffer (the
   * gradients are bound elsewhere); *no_params: no parameter values (a real job's). */
  void (*store)(const ts_dist *d, int *no_grads, int *no_params);
  /* Real jobs, after the optimizer exists: the reduction over the layout's ranks `base` (the
   * world, or a pipeline stage's; NULL: no rank shares this rank's parameters) created, and
   * attached to the training plans for overlap where the layout allows it (may_overlap). */
  int (*start)(ts_dist *d, ts_comm *base, int may_overlap);
  /* Before the micro-steps of a step (grads: the store's gradient buffer): overlap armed. */
  void (*begin)(ts_dist *d, float *grads);
  /* Floats of the caller's accumulation buffer (accum > 1), 0 when the implementation
   * accumulates its own reduced part. */
  size_t (*accum_numel)(const ts_dist *d);
  /* After micro-step k: acc = grads (k = 0) or acc += grads, or the implementation's own. */
  int (*accumulate)(ts_dist *d, const float *grads, float *acc, int64_t k);
  /* Real jobs, after the micro-steps: g reduced over the ranks holding each gradient (or into
   * the implementation's part); *wait_ms the time spent waiting for it. */
  int (*reduce)(ts_dist *d, float *g, double *wait_ms);
  /* Global-norm clipping where the reduced gradients are the implementation's (0 and *mine = 0:
   * they are g, the layout's clipping applies). */
  int (*clip)(ts_dist *d, float *g, ts__clip *c, int *mine);
  /* The rank's optimizer over the trainable segments segs (ts_dist_optim_create) and its step
   * (ts_dist_optim_step). */
  int (*optim_create)(ts_dist *d, const ts_optim_config *cfg, const ts_optim_segment *segs, int nseg,
                      ts_optim **out);
  int (*optim_step)(ts_dist *d, ts_optim *opt, float *params, const float *grads, float lr);
  /* Parameters the implementation holds instead of the store (stage 3), laid out as a slot;
   * NULL: the store holds them. */
  float *(*held_params)(ts_dist *d);
  /* Optional: after the parameters it holds were written (a checkpoint loaded; ts_dist_to_device),
   * whatever it derives from them brought up to date (ZeRO's mixed precision: the 16-bit weights). */
  int (*loaded)(ts_dist *d);
  /* One optimizer slot (the rank's, loc) <-> the same slot of the whole store full (whole):
   * gather = 1 collects (collective), 0 cuts. */
  int (*move)(ts_dist *d, ts_params *full, float *loc, float *whole, int gather);
  /* Where it holds the reduced gradient of the store's elements [flat, flat + numel) (one
   * parameter), g being the gradient buffer the layout reduced: elements [*lo, *lo + *n) of it
   * (the whole, or the rank's part); NULL: the whole, in g. */
  float *(*reduced_at)(ts_dist *d, float *g, size_t flat, size_t numel, size_t *lo, size_t *n);
  /* fn(user, flat, n, work) for every range of the store its optimizer's slots hold apart from
   * the store's layout (store elements [flat, flat + n) at `work` of a slot); none when the slots
   * have the store's layout. Stops at the first non-zero return. */
  int (*each_range)(const ts_dist *d, int (*fn)(void *user, size_t flat, size_t n, size_t work), void *user);
  /* The bytes it holds: adjusts *m's param_bytes / grad_bytes / accum_bytes (the store's
   * figures on entry) and *opt_elems (the elements the rank's optimizer updates). */
  int (*memory)(ts_dist *d, ts_dist_memory_info *m, int64_t *opt_elems);
  /* Gradient buckets it reduces (0 before start / without reduction). */
  int (*num_buckets)(const ts_dist *d);
  /* Its buckets' collectives recorded into the profiler p (NULL: off; ts_dist_set_prof). */
  int (*set_prof)(ts_dist *d, ts_prof *p);
  /* Optional: completes its writes into the store's parameters still in flight (ZeRO's
   * prefetched all-gathers) before something other than the training plan reads them. */
  int (*settle)(ts_dist *d);
  /* Whether the optimizer state is sharded, and the replicated / sharded elements. */
  int (*sharded)(const ts_dist *d, size_t *replicated, size_t *sharded);
  /* Bytes one rank sends per step (ring algorithms) into *bytes. */
  int (*comm_bytes)(const ts_dist *d, double *bytes);
  /* What `tessera plan` prints of it (nothing for the plain all-reduce), and how the parameters
   * are held when it holds them (NULL: as the layout says). */
  void (*describe)(const ts_dist *d, FILE *out);
  const char *(*params_note)(const ts_dist *d);
  /* The reducer's note on groups spanning hosts ("" without). */
  const char *(*note)(const ts_dist *d);
  void (*free)(ts_dist *d);
};

extern const ts__sync_vt ts__sync_allreduce;
extern const ts__sync_vt ts__sync_zero;
/* The implementation a configuration asks for (dist_zero.c: ZeRO when sharding is set). */
const ts__sync_vt *ts__sync_choose(const ts_dist_config *c);

/* The all-reduce implementation's pieces other implementations reuse (sync_allreduce.c): the
 * caller's whole accumulation buffer, and the optimizer over the whole store (LAMB's norms
 * summed over slices where the store holds them). */
size_t ts__sync_accum_numel_whole(const ts_dist *d);
int ts__sync_accumulate_whole(ts_dist *d, const float *grads, float *acc, int64_t k);
/* The checkpoint manifest's keys of the sharding a configuration asks for: its stage and shard
 * group (0 and 0 without), as trainer_ckpt.c always wrote them (dist_zero.c). */
void ts__sync_manifest_keys(const ts_dist_config *c, char *buf, size_t cap);
int ts__sync_optim_create_whole(ts_dist *d, const ts_optim_config *cfg, const ts_optim_segment *segs, int nseg,
                                ts_optim **out);

#endif
