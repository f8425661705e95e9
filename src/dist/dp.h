/* Internal: data-parallel bucketed gradient all-reduce overlapped with backward (see dp.c). */
#ifndef TS_DP_H
#define TS_DP_H

#include "tessera/comm.h"
#include "tessera/params.h"
#include "tessera/runtime.h"

typedef struct ts__dp ts__dp;

/* Buckets of about bucket_mb MiB over the trainable parameters of p whose gradients g produces
 * (ts_params_attach_grads done), or only those with member[id] != 0 when member is not NULL
 * (a bucket never spans a parameter left out); reduction MEAN (mean) or SUM; wire dtype f32,
 * bf16 or f16. */
int ts__dp_create(ts_comm *comm, ts_params *p, const ts_graph *g, double bucket_mb, int mean,
                  ts_dtype wire, const int *member, ts__dp **out);
void ts__dp_free(ts__dp *d);
int ts__dp_num_buckets(const ts__dp *d);
/* Before a run whose gradients (into `grads`, the flat buffer) are to be reduced. */
void ts__dp_begin(ts__dp *d, float *grads);
/* The plan hook: after each node, starts the buckets it completed and polls those in flight. */
void ts__dp_hook(const ts_hook_info *e, void *user);
/* Starts what has not started and waits for every bucket; gradients are then reduced in place. */
int ts__dp_finish(ts__dp *d);
/* Seconds the last ts__dp_finish spent waiting (communication not hidden behind backward). */
double ts__dp_wait_seconds(const ts__dp *d);

#endif
