/* Internal: bucketed gradient all-reduce over one communicator, overlapped with backward (buckets.c;
 * ts_grad_reducer runs one per group of ranks). */
#ifndef TS_DIST_BUCKETS_H
#define TS_DIST_BUCKETS_H

#include "tessera/comm.h"
#include "tessera/params.h"
#include "tessera/prof.h"
#include "tessera/runtime.h"

typedef struct ts__buckets ts__buckets;

/* 16-bit wire slots (parallel.comm_dtype under sharding, ts__buckets_set_wire_slots): the buckets
 * in flight at once */
#define TS__BUCKET_WIRE_SLOTS 4

/* Buckets of about bucket_mb MiB over the trainable parameters of p whose gradients g produces
 * (ts_params_attach_grads done), or only those with member[id] != 0 when member is not NULL
 * (a bucket never spans a parameter left out; member[id] == 2: the parameter is a bucket of its
 * own); reduction MEAN (mean) or SUM; wire dtype f32, bf16 or f16. */
int ts__buckets_create(ts_comm *comm, ts_params *p, const ts_graph *g, double bucket_mb, int mean,
                  ts_dtype wire, const int *member, ts__buckets **out);
/* The same with split points (MindSpore's all_reduce_fusion_config): splits[0..nsplits) are
 * increasing indices into the store's trainable parameters in registration order; a bucket never
 * spans a split, and with nsplits > 0 the size limit is off (each span between splits is one
 * bucket, less any parameters `member` leaves out). TS_ECONFIG naming
 * parallel.all_reduce_fusion_config for an index that is not increasing or beyond the gradients. */
int ts__buckets_create_split(ts_comm *comm, ts_params *p, const ts_graph *g, double bucket_mb, int mean,
                             ts_dtype wire, const int *member, const int *splits, int nsplits, ts__buckets **out);
void ts__buckets_free(ts__buckets *d);
/* Hierarchical mode (parallel.allreduce; all-reduce mode, f32 SUM or MEAN): every bucket is
 * all-reduced over t (the topology of the buckets' communicator, owned by the caller) by
 * ts_comm_iallreduce_hier, started during backward as it completes like the flat ones (the tail
 * on a native communicator, and every bucket in blocking mode, by the blocking
 * ts_comm_allreduce_hier after backward). NULL: flat (the default). */
void ts__buckets_set_hier(ts__buckets *d, ts_comm_topo *t);
/* Reduce-scatter mode: every bucket reduce-scattered by the ring of point-to-point messages
 * (ts_comm_ireduce_scatter_ring) on `ring`, a communicator of the same ranks as the buckets' own
 * kept for the rings alone (its tags are the bucket numbers); not owned. NULL: MPI's. */
void ts__buckets_set_ring(ts__buckets *d, ts_comm *ring);
int ts__buckets_num_buckets(const ts__buckets *d);
/* All-reduce mode, f32: bucket k (use[k] != 0) is all-reduced from a separate send buffer instead
 * of in place (OpenMPI's libnbc runs an in-place all-reduce as a binomial tree whatever the size;
 * out of place it may take a ring or Rabenseifner's algorithm, which send about half as much over
 * the slowest link on 4 or more ranks). Two send slots, each as large as the largest such bucket,
 * taken in turn (a bucket waits for the older one's all-reduce when both are in flight); *numel:
 * their floats. */
int ts__buckets_set_send(ts__buckets *d, const unsigned char *use, size_t *numel);
/* Profiling: each bucket's collective recorded into p (when active) as a span from its issue to
 * its observed completion (kind TS_PROF_COLLECTIVE, named "allreduce bucket <first + k>" or
 * "reduce_scatter bucket ..", on track `track + k`; args: bucket, params, elements, dtype, ranks,
 * the call, observed_at test / wait / blocking; bytes: the bucket's payload). NULL: off (no clock
 * read). Buckets without a communicator are never recorded. */
int ts__buckets_set_prof(ts__buckets *d, ts_prof *p, int first, int track);
/* Reduce-scatter mode (optimizer sharding): each bucket [off, off + len) is cut into
 * the N ranks' parts of ceil(len / N) elements (the last ones shorter or empty), and the reduced
 * part of rank r goes to out + out_off (ts__buckets_set_out) instead of back into the gradients;
 * *total gets the elements of rank r's parts over all buckets. N and r are the communicator's
 * (checked), or any rank of N for buckets made without one (comm NULL: the layout of a dry run;
 * such buckets are never started). */
int ts__buckets_scatter(ts__buckets *d, int N, int r, size_t *total);
/* Reduce-scatter mode with a 16-bit wire (the buckets' dtype, parallel.comm_dtype): TS__BUCKET_WIRE_SLOTS wire slots
 * of the largest bucket's elements in that dtype (allocated unless sizing), into which each
 * bucket's gradients are rounded and reduce-scattered in place (MPI's 16-bit reduce-scatter or the
 * ring), the rank's part widened to its f32 place after; a fifth bucket waits for the oldest one's
 * collective. *numel: the slots' elements (0 for an f32 wire). */
int ts__buckets_set_wire_slots(ts__buckets *d, int sizing, size_t *numel);
/* out NULL (not staged): in place, the rank's reduced part written at its own place in the
 * gradients (off + the prefix sum of counts), the rest of each bucket left undefined (parameters
 * without a gradient are zeroed before each reduction). */
void ts__buckets_set_out(ts__buckets *d, float *out);
/* Bucket k: its flat range, its ranks' parts (reduce-scatter mode; NULL otherwise) and where this
 * rank's part sits in out. Parts start at the prefix sums of counts. */
void ts__buckets_part(const ts__buckets *d, int k, size_t *off, size_t *len, const size_t **counts, size_t *out_off);
/* Staged mode (reduce-scatter mode only; optimizer sharding stages 2 and 3): no whole flat
 * gradient buffer. Assigns every bucket a staging slot from the graph (a bucket holds its slot
 * from the first node writing one of its gradients to the end of its reduce-scatter; a slot is
 * reused once its bucket was last touched before the next one's first writer: two slots for a
 * backward in reverse layer order) and allocates the slots (each as large as its largest bucket),
 * with accumulate also room per slot for a reduced part. The plan must bind each gradient to
 * ts__buckets_grad_addr and run with ts__buckets_hook attached, which also waits, before a
 * bucket's first writer runs, for its slot's previous reduce-scatter. *numel: the floats
 * allocated. Also in dry runs (without a communicator): the binding shapes the plan; with sizing
 * the slots are reserved but never written (no zeroing: a dry build pricing a large model must not
 * touch gigabytes of pages). */
int ts__buckets_stage(ts__buckets *d, int accumulate, int sizing, size_t *numel);
/* Reduce-scatter mode with 16-bit gradients (ZeRO's mixed precision; before ts__buckets_stage,
 * instead of wire slots; the buckets' dtype bf16 or f16): backward writes the gradients in that
 * dtype, into grads16 (the whole flat buffer's layout; NULL when staged: 16-bit staging slots,
 * ts__buckets_grad_ptr), and each bucket is reduce-scattered there in place, the rank's reduced
 * part left in 16 bits: at its own place (out16 NULL) or at out16 + its out offset. Nothing is
 * rounded or widened; no accumulation over micro-steps. */
int ts__buckets_set_low(ts__buckets *d, uint16_t *grads16, uint16_t *out16);
/* Staged mode: where the gradient at flat offset `flat` lives, f32 or (ts__buckets_set_low) 16-bit;
 * NULL outside every bucket or when not staged. */
void *ts__buckets_grad_ptr(const ts__buckets *d, size_t flat);
/* Staged mode: the staging slots (0 otherwise). */
int ts__buckets_num_slots(const ts__buckets *d);
/* Staged mode, for a device running the reduction itself (ZeRO-2 on GPU ranks): bucket k's staging
 * slot (-1 when not staged) and in *last the node after which its gradients are complete (the
 * graph's node count when no node writes them: reduced after the run). */
int ts__buckets_slot_of(const ts__buckets *d, int k, int *last);
/* Staged mode: slot q's buffer and its elements (NULL when q is not a slot). */
float *ts__buckets_slot_data(const ts__buckets *d, int q, size_t *numel);
/* The parameters of the buckets that get no gradient (zeros in their bucket's reduction): hole h's
 * bucket, flat offset and elements; 0 when h is past the last one. */
int ts__buckets_hole(const ts__buckets *d, int h, int *k, size_t *off, size_t *len);
/* Staged mode: where the gradient element at flat offset `flat` of the store lives (its bucket's
 * slot); NULL outside every bucket or when not staged. */
float *ts__buckets_grad_addr(const ts__buckets *d, size_t flat);
/* Staged mode, for the next run: blocking, a bucket is reduce-scattered with a blocking call as
 * soon as it is complete (no overlap: parallel.overlap false, pipelines); accumulate, the reduced
 * part is added to the rank's part in `out` instead of replacing it (micro-steps after the first;
 * needs ts__buckets_stage's accumulate). */
void ts__buckets_set_mode(ts__buckets *d, int blocking, int accumulate);
/* Before a run whose gradients (into `grads`, the flat buffer) are to be reduced. */
void ts__buckets_begin(ts__buckets *d, float *grads);
/* The plan hook: after each node, starts the buckets it completed and polls those in flight. */
void ts__buckets_hook(const ts_hook_info *e, void *user);
/* Starts what has not started and waits for every bucket; gradients are then reduced in place. */
int ts__buckets_finish(ts__buckets *d);
/* Seconds the last ts__buckets_finish spent waiting (communication not hidden behind backward). */
double ts__buckets_wait_seconds(const ts__buckets *d);
/* Staged mode: seconds the hook waited, before a bucket's first writer, for its slot's previous
 * reduce-scatter since the last call (communication not hidden behind backward). */
double ts__buckets_take_claim_wait(ts__buckets *d);

#endif
