/* Tessera communication layer: communicators and collectives over MPI.
 *
 * One process works with or without mpirun (MPI singleton). Every call returns a ts_err status;
 * MPI errors, timeouts and mismatched collectives come back as TS_ECOMM with a message (see
 * ts_last_error()) naming the collective, its sequence number, the rank, the dtype and count.
 * Nothing here prints or exits, except ts_comm_abort, which ends the whole job on request, and
 * the watchdog of native blocking calls (below), which ends a job that is stuck: that is the
 * contract a caller accepts by choosing TS_COMM_BLOCKING_NATIVE, never a reaction to bad input.
 *
 * Rules shared by every collective (as in MPI):
 *  - all ranks of a communicator call the same collectives in the same order, with matching
 *    dtype, op, root and counts (ts_comm_set_debug_check verifies this at run time);
 *  - counts are in elements of `dtype` and must fit in an int (TS_ERANGE otherwise);
 *  - every call on a communicator is made from one thread: the one that called ts_comm_init,
 *    or, for a communicator duplicated from it, the one thread that uses the duplicate (the
 *    asynchronous checkpoint writer does this, with polled waits). MPI is initialised with
 *    MPI_THREAD_MULTIPLE for that and for the library's own watchdog thread, which calls MPI only
 *    while the main thread is blocked in a native call (docs/comm.md has the measurement: no
 *    slower than FUNNELED here).
 *
 * Accumulation: f32, i32, i64 reductions use MPI's built-in operations. bf16 and f16 reductions
 * move 16-bit data on the wire but accumulate in f32: the buffer is cut into one block per rank,
 * an all-to-all brings every rank's copy of block r to rank r, which sums (or max/min) them in
 * f32 in rank order 0..n-1 and rounds once to the 16-bit type (round to nearest even, the
 * ts_f32_to_bf16 / ts_f32_to_f16 conversions); an allgather then spreads the blocks. The result
 * is bitwise the serial f32 reduction in rank order, identical on every rank, and sends the same
 * volume as a ring reduce-scatter + allgather. MEAN is SUM divided by the communicator size
 * (float: one division after the sum; integers: C division, truncating toward zero).
 * u8 is accepted by data-movement collectives (broadcast, allgather(v), alltoall(v), send/recv)
 * but not by reductions (TS_EDTYPE).
 *
 * Progress of non-blocking collectives: MPI progresses them only inside MPI calls, so a
 * request issued with ts_comm_i* advances when the caller polls it with ts_comm_test (or any
 * other ts_comm_* call). To overlap communication with computation, call ts_comm_test on the
 * outstanding requests between kernels; ts_comm_wait finishes them. bf16/f16 reductions are two
 * MPI stages; ts_comm_test performs the local f32 sum and issues the second stage.
 *
 * Timeouts: every blocking call waits for at most the timeout (default 300 s;
 * ts_comm_set_timeout or env TESSERA_COMM_TIMEOUT; 0 means wait forever), in one of two ways
 * chosen per communicator (ts_comm_set_blocking):
 *  - polled (the default): the non-blocking MPI call, then MPI_Test with a short spin, yields and
 *    short sleeps. On expiry the call returns TS_ECOMM ("rank 1: allreduce(sum) #12 (f32 x 1000)
 *    did not complete within 300 s: rank 0 of 2 never reached it (stalled or dead)"). A
 *    communicator whose collective timed out is marked failed: later calls on it fail fast with
 *    TS_ECOMM. The MPI operation cannot be cancelled, so the buffers of the timed out call may
 *    still be written if the peer arrives late: keep them alive, and end the job with
 *    ts_comm_abort (the normal reaction), or free that communicator and carry on with others.
 *  - native: MPI's blocking collective (MPI_Allreduce, ...), faster when nothing is left to
 *    overlap (about 2x less time than MPI_Iallreduce + polling for 2 MiB on 2 ranks here). A
 *    blocking MPI call cannot be interrupted, so the timeout is kept by a watchdog thread (one
 *    per process, asleep on a condition variable, started by the first native call that has a
 *    deadline): on expiry it writes the same message through the logging hook and ends the job
 *    with MPI_Abort, exit status TS_COMM_EXIT_TIMEOUT. The call does not return.
 * Non-blocking requests, ts_comm_wait, send/recv and communicator creation are always polled. */
#ifndef TESSERA_COMM_H
#define TESSERA_COMM_H

#include "tessera/ops.h"
#include "tessera/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_comm ts_comm;
typedef struct ts_comm_req ts_comm_req;


/* "sum", "mean", "max", "min" ("?" if invalid). */
const char *ts_reduce_op_name(ts_reduce_op op);

/* ---- process-wide setup ---- */

/* Initialises MPI (MPI_Init_thread requesting MPI_THREAD_MULTIPLE) unless it already is,
 * and creates the world communicator (a duplicate of MPI_COMM_WORLD, so library traffic never
 * mixes with the application's). Works without mpirun as a 1-rank singleton. argc/argv may be
 * NULL. Idempotent. Reads TESSERA_COMM_TIMEOUT (seconds), TESSERA_COMM_CHECK (0/1) and
 * TESSERA_COMM_BLOCKING (polled/native) (a malformed value is TS_ECONFIG); ts_comm_set_timeout
 * and ts_comm_set_debug_check calls made after it take precedence. Refuses (TS_ECONFIG) other
 * launchers' rank variables that disagree with MPI's (ts_comm_check_env, below). */
int ts_comm_init(int *argc, char ***argv);
/* Checks the rank and job size other launchers put in the environment against this process's
 * rank and size: MindSpore's RANK_ID / RANK_SIZE (its run.sh starts one process per device,
 * without mpirun) and torchrun's RANK / WORLD_SIZE. Each one set must be a whole number equal to
 * the rank / the size. A size above 1 in a job of one rank is a process started without mpirun,
 * which Tessera cannot join to the others: TS_ECONFIG with one line saying how to start the job
 * (`tessera launch --rank-table $RANK_TABLE_FILE -- COMMAND`, or `-n N`). DEVICE_ID, LOCAL_RANK
 * and RANK_TABLE_FILE are not checked. ts_comm_init checks every rank this way (collectively: all
 * ranks fail with the first bad rank's message, and MPI is finalised again if it started it); a
 * process that trains without MPI calls it with ts_job_rank's rank and size. */
int ts_comm_check_env(int rank, int size);
/* 1 between ts_comm_init and ts_comm_finalize. */
int ts_comm_initialized(void);
/* Stops the watchdog thread (if it started), frees the world communicator and finalises MPI if
 * ts_comm_init initialised it. Communicators made by the caller should be freed first.
 * Idempotent; MPI cannot be initialised again after. */
int ts_comm_finalize(void);
/* Ends every process of the job (MPI_Abort on c, or on MPI_COMM_WORLD if c is NULL) with `code`.
 * Does not return when MPI is initialised; TS_EINVAL otherwise. */
int ts_comm_abort(ts_comm *c, int code);
/* Ends every process of the job as ts_comm_abort(NULL, code) does, after waiting up to grace_s
 * seconds for every other rank to call it too: when all ranks failed at the same point (an error
 * they agreed on) each has reported its own error before the job ends, and the wait is short;
 * when only some ranks failed, the job ends after grace_s. Does not return when MPI is
 * initialised; TS_EINVAL otherwise. */
int ts_comm_abort_all(int code, double grace_s);

/* How the blocking calls of a communicator wait for their deadline (see the top of this file). */
typedef enum {
  TS_COMM_BLOCKING_POLLED = 0, /* non-blocking MPI call + polling; a timeout returns TS_ECOMM */
  TS_COMM_BLOCKING_NATIVE = 1  /* MPI's blocking call; a timeout ends the job (the watchdog) */
} ts_comm_blocking;

/* Exit status of a job the watchdog ended (a native blocking call outlived the timeout): 75,
 * EX_TEMPFAIL of sysexits.h, distinct from the command's 1 (runtime error) and 2 (configuration). */
#define TS_COMM_EXIT_TIMEOUT 75

/* Timeout in seconds of every blocking call (0 = none). Process-wide; default 300. */
void ts_comm_set_timeout(double seconds);
double ts_comm_get_timeout(void);
/* Debug consistency check: when on, each collective first allgathers (sequence number, op,
 * reduce op, dtype, count, root) over the communicator and compares; the first mismatch is
 * TS_ECOMM on every rank ("collective #12: rank 0 issued allreduce(sum) f32 x 1000, rank 1
 * issued allgather f32 x 500"). Costs one small allgather per collective. Process-wide; all ranks
 * must agree on it. Default off (env TESSERA_COMM_CHECK=1 turns it on at init). */
void ts_comm_set_debug_check(int on);
int ts_comm_get_debug_check(void);

/* ---- communicators ----
 * Creating a communicator is collective over its parent: every rank of the parent must call
 * it (with the same arguments, where stated), guarded by the timeout. */

/* The world communicator (owned by the library: ts_comm_free on it does nothing). */
int ts_comm_world(ts_comm **out);
int ts_comm_rank(const ts_comm *c);
int ts_comm_size(const ts_comm *c);
/* Rank of this process in the world communicator. */
int ts_comm_world_rank(const ts_comm *c);
/* Sequence number of the next collective on c (starts at 0; counts collectives issued on c). */
uint64_t ts_comm_seq(const ts_comm *c);
/* 1 once a collective on c timed out or failed in MPI (every later call on c fails fast). */
int ts_comm_failed(const ts_comm *c);
/* Writes what c was last asked to do, for a message when a job is being ended (e.g. from a
 * signal or a watchdog in the caller): "rank 1: 12 collectives issued, last allreduce(sum) #11
 * (f32 x 1000), waiting for it" (or "done"). Returns buf. */
char *ts_comm_describe(const ts_comm *c, char *buf, size_t cap);

/* A new communicator with the same ranks (its own sequence numbers and failure state). */
int ts_comm_dup(ts_comm *c, ts_comm **out);
/* Ranks with the same color form one communicator, ordered by key (then by rank in c). A
 * negative color gives *out = NULL (that rank joins none). Like MPI_Comm_split. */
int ts_comm_split(ts_comm *c, int color, int key, ts_comm **out);
/* A communicator of ranks[0..n-1] of c (rank i of it is ranks[i]); every rank of c calls it with
 * the same list; ranks not in the list get *out = NULL. TS_EINVAL for out-of-range or repeated
 * ranks, TS_ECOMM if ranks passed different lists. */
int ts_comm_group(ts_comm *c, const int *ranks, int n, ts_comm **out);
/* The ranks of c arranged as a row-major grid dims[0] x ... x dims[ndim-1] (the product must be
 * the size of c; rank r has coordinates with the last axis fastest, like MindSpore's device
 * matrix): the communicator of the ranks whose coordinates differ from this rank's only along
 * `axis`, ordered by their coordinate on that axis (so its rank is this rank's coordinate).
 * E.g. dims (2,2): axis 1 gives the rows {0,1},{2,3}; axis 0 the columns {0,2},{1,3}. */
int ts_comm_grid_axis(ts_comm *c, int ndim, const int *dims, int axis, ts_comm **out);
/* This rank's coordinates in that grid (coords has ndim entries). */
int ts_comm_grid_coords(int rank, int ndim, const int *dims, int *coords);
/* Frees a communicator (NULL and the world communicator are ignored). */
void ts_comm_free(ts_comm *c);

/* ---- topology: which ranks share a host ----
 * A host is what MPI counts as one shared-memory node (MPI_Comm_split_type SHARED; on a cluster,
 * one machine). Hosts are numbered in the order of their lowest rank. */
typedef struct ts_comm_topo ts_comm_topo;
/* Learns the hosts of c's ranks and makes this rank's node communicator (its host's ranks, in
 * c's order) and, on each host's first rank, the leaders' communicator (one rank per host).
 * Collective over c. The topology refers to c: free it before c. Over the world, a job on
 * several hosts also names the host in the timeout's messages ("rank 2 (host node1)"). */
int ts_comm_topo_create(ts_comm *c, ts_comm_topo **out);
void ts_comm_topo_free(ts_comm_topo *t);
int ts_comm_topo_num_hosts(const ts_comm_topo *t);
/* The host of rank `rank` of c (-1 out of range); its name (MPI_Get_processor_name of its first rank). */
int ts_comm_topo_host(const ts_comm_topo *t, int rank);
const char *ts_comm_topo_host_name(const ts_comm_topo *t, int host);
/* Ranks on this rank's host. */
int ts_comm_topo_local_size(const ts_comm_topo *t);
/* 1 when every host holds the same number of ranks, consecutive in c (the layout mpirun's by-slot
 * mapping gives a host file with equal slots). */
int ts_comm_topo_uniform(const ts_comm_topo *t);
ts_comm *ts_comm_topo_node(const ts_comm_topo *t);
/* NULL on the ranks that do not lead their host. */
ts_comm *ts_comm_topo_leaders(const ts_comm_topo *t);
/* "2 hosts: node0 (ranks 0-1), node1 (ranks 2-3)". Returns buf. */
char *ts_comm_topo_describe(const ts_comm_topo *t, char *buf, size_t cap);
/* Hierarchical all-reduce of buf (in place) over the topology's communicator: an all-reduce
 * inside each host, an all-reduce between the hosts' leaders, a broadcast inside each host (f32,
 * SUM or MEAN: sums, then one division by the size). Blocking (each step under the timeout like
 * any blocking call). The sum's order is (host 0's ranks) + (host 1's) + ..., so it may differ
 * from the flat all-reduce's in the last bits. TS_EDTYPE for another dtype or op. */
int ts_comm_allreduce_hier(ts_comm_topo *t, void *buf, size_t count, ts_dtype dtype, ts_reduce_op op);
/* Non-blocking ts_comm_allreduce_hier (the same sums, host by host): the three steps are issued one
 * after another as each completes, advanced by ts_comm_hier_test / ts_comm_hier_wait on any of
 * t's requests (each test advances all of them). The requests of one topology advance in the
 * order they were started (MPI needs each communicator's collectives in the same order on every
 * rank): start them in the same order on every rank. buf is not to be touched until done. Each
 * step waits under the timeout like ts_comm_wait. A request freed before it completes fails its
 * communicator as ts_comm_req_free does. */
typedef struct ts_comm_hier_req ts_comm_hier_req;
int ts_comm_iallreduce_hier(ts_comm_topo *t, void *buf, size_t count, ts_dtype dtype, ts_reduce_op op,
                            ts_comm_hier_req **out);
int ts_comm_hier_test(ts_comm_hier_req *r, int *done);
int ts_comm_hier_wait(ts_comm_hier_req *r);
void ts_comm_hier_req_free(ts_comm_hier_req *r);

/* The ring reduce-scatter (src/comm/ring.c): the result of ts_comm_ireduce_scatter (send holds
 * sum(counts) f32 elements, rank r gets block r reduced; uneven and zero counts; in place when
 * recv == send + the rank's prefix sum of counts) by N - 1 steps of point-to-point messages
 * around the ranks (each rank sends (N - 1) / N of the message once), where MPI's non-blocking
 * one reduces the whole message up a binomial tree and scatters from rank 0. The steps are issued
 * one after another as ts_comm_ring_test / ts_comm_ring_wait see each complete; every wait under
 * the timeout. Its messages carry `tag` (0 <= tag < the watchdog's): every ring in flight on c at
 * once needs its own, the same on every rank, and no other point-to-point traffic on c may use it
 * (give the rings a communicator of their own, ts_comm_dup). The sum's order is the ring's,
 * deterministic, not MPI's. send and recv belong to the request until it completes (send's other
 * blocks are read, never written). f32, bf16 or f16, sum or mean (TS_EDTYPE otherwise); 16-bit data
 * travels in 16 bits, each hop adding in f32 and rounding once for the next (N - 1 roundings). */
typedef struct ts_comm_ring_req ts_comm_ring_req;
int ts_comm_ireduce_scatter_ring(ts_comm *c, const void *send, void *recv, const size_t *counts, ts_dtype dtype,
                                 ts_reduce_op op, int tag, ts_comm_ring_req **out);
/* The ring all-gather: ts_comm_iallgatherv's result (rank r's counts[r] elements of send land at
 * displs[r] of recv on every rank; displs NULL: packed; in place when send == recv + displs[rank]
 * or send is NULL) by N - 1 steps around the ranks, each block passed on from its place in recv
 * (each rank sends (N - 1)/N of the whole once); any dtype; tags and communicator as above. */
int ts_comm_iallgatherv_ring(ts_comm *c, const void *send, void *recv, const size_t *counts, const size_t *displs,
                             ts_dtype dtype, int tag, ts_comm_ring_req **out);
int ts_comm_ring_test(ts_comm_ring_req *r, int *done);
int ts_comm_ring_wait(ts_comm_ring_req *r);
/* Frees r; one still in flight fails its communicator as ts_comm_req_free does. NULL is ignored. */
void ts_comm_ring_req_free(ts_comm_ring_req *r);

/* Chooses how the blocking collectives on c wait (allreduce, allgather(v), reduce_scatter(_block),
 * broadcast, alltoall(v), barrier, bf16/f16 reductions included; the results are those of the
 * polled path: bitwise for bf16/f16 and integers, and for f32 on 2 ranks; on 3 or more MPI's
 * blocking and non-blocking algorithms may add f32 in different orders). Every rank of c must
 * choose the same (MPI does not match a blocking collective with a non-blocking one; the debug
 * check compares it). Communicators made from c afterwards (dup, split, group, grid_axis) start
 * with c's mode. Env TESSERA_COMM_BLOCKING=polled|native (read by ts_comm_init) overrides every
 * communicator's mode. TS_EINVAL for a NULL c or an unknown mode. */
int ts_comm_set_blocking(ts_comm *c, ts_comm_blocking mode);
/* The mode in force on c (the override included); polled for NULL. */
ts_comm_blocking ts_comm_get_blocking(const ts_comm *c);

/* Splits `total` elements into n blocks as evenly as possible, the first total % n blocks one
 * larger (the layout of the blocked reduce-scatter and of the bf16/f16 reductions). */
void ts_comm_block_counts(size_t total, int n, size_t *counts);

/* ---- blocking collectives ----
 * Buffers are raw arrays of `dtype`; send and recv must not overlap unless stated. */

/* recv[i] = op over ranks of send[i], i < count. In place when send == recv. */
int ts_comm_allreduce(ts_comm *c, const void *send, void *recv, size_t count, ts_dtype dtype,
                      ts_reduce_op op);
/* recv (size*count) = the send blocks (count each) of ranks 0..size-1 in rank order. In place
 * when send == recv + rank*count (the rank's block already sits in recv). */
int ts_comm_allgather(ts_comm *c, const void *send, void *recv, size_t count, ts_dtype dtype);
/* Uneven allgather: rank r contributes counts[r] elements (send holds counts[rank]); recv holds
 * them at offsets displs[r] (displs NULL: packed, the prefix sums of counts). In place when send
 * == recv + displs[rank]. */
int ts_comm_allgatherv(ts_comm *c, const void *send, void *recv, const size_t *counts,
                       const size_t *displs, ts_dtype dtype);
/* send holds sum(counts) elements; rank r receives block r (counts[r] elements, at the prefix
 * sum of counts) reduced over ranks. Counts may be uneven and zero. In place when recv == send +
 * the rank's prefix sum of counts: its reduced block is written at its own place in send (the
 * rest of send is then undefined); the same for the _block and non-blocking forms. */
int ts_comm_reduce_scatter(ts_comm *c, const void *send, void *recv, const size_t *counts,
                           ts_dtype dtype, ts_reduce_op op);
/* Equal blocks: send holds size*count elements, recv count. */
int ts_comm_reduce_scatter_block(ts_comm *c, const void *send, void *recv, size_t count,
                                 ts_dtype dtype, ts_reduce_op op);
/* buf (count elements) of `root` is copied to every rank. */
int ts_comm_broadcast(ts_comm *c, void *buf, size_t count, ts_dtype dtype, int root);
/* Block j (count elements) of send goes to rank j; block i of recv comes from rank i. */
int ts_comm_alltoall(ts_comm *c, const void *send, void *recv, size_t count, ts_dtype dtype);
/* Uneven all-to-all: sendcounts[j] elements at sdispls[j] go to rank j; recvcounts[i] elements
 * from rank i land at rdispls[i]. NULL displacements mean packed (prefix sums of the counts). */
int ts_comm_alltoallv(ts_comm *c, const void *send, const size_t *sendcounts,
                      const size_t *sdispls, void *recv, const size_t *recvcounts,
                      const size_t *rdispls, ts_dtype dtype);
int ts_comm_barrier(ts_comm *c);

/* Point to point (0 <= tag < MPI_TAG_UB: the highest tag is the watchdog's). Not collective: no
 * sequence number and no debug check. */
int ts_comm_send(ts_comm *c, const void *buf, size_t count, ts_dtype dtype, int dest, int tag);
/* Receives exactly count elements (a longer message is TS_ECOMM). A timed-out receive is
 * cancelled and leaves c usable. */
int ts_comm_recv(ts_comm *c, void *buf, size_t count, ts_dtype dtype, int src, int tag);
/* Buffered send (pipeline stage cuts): buf is copied, the copy is sent without blocking and
 * owned by c until it completes, so the caller may reuse buf at once and two ranks sending to
 * each other never wait on one another. Finished sends are reaped on each call. */
int ts_comm_send_copy(ts_comm *c, const void *buf, size_t count, ts_dtype dtype, int dest, int tag);
/* Waits for every buffered send of c (within the timeout) and frees their copies. */
int ts_comm_flush_sends(ts_comm *c);
/* Buffered sends of c still in flight, and the bytes of their copies. */
int ts_comm_pending_sends(const ts_comm *c, size_t *bytes);

/* ---- non-blocking collectives ----
 * Same arguments and rules as the blocking forms; *req receives a handle. The buffers (and the
 * counts/displs arrays, which are copied) belong to the operation until it completes. Requests
 * progress only while some ts_comm_* call runs: poll with ts_comm_test between pieces of work. */
int ts_comm_iallreduce(ts_comm *c, const void *send, void *recv, size_t count, ts_dtype dtype,
                       ts_reduce_op op, ts_comm_req **req);
int ts_comm_iallgather(ts_comm *c, const void *send, void *recv, size_t count, ts_dtype dtype,
                       ts_comm_req **req);
int ts_comm_iallgatherv(ts_comm *c, const void *send, void *recv, const size_t *counts,
                        const size_t *displs, ts_dtype dtype, ts_comm_req **req);
int ts_comm_ireduce_scatter(ts_comm *c, const void *send, void *recv, const size_t *counts,
                            ts_dtype dtype, ts_reduce_op op, ts_comm_req **req);
int ts_comm_ireduce_scatter_block(ts_comm *c, const void *send, void *recv, size_t count,
                                  ts_dtype dtype, ts_reduce_op op, ts_comm_req **req);
int ts_comm_ibroadcast(ts_comm *c, void *buf, size_t count, ts_dtype dtype, int root,
                       ts_comm_req **req);
int ts_comm_isend(ts_comm *c, const void *buf, size_t count, ts_dtype dtype, int dest, int tag,
                  ts_comm_req **req);
int ts_comm_irecv(ts_comm *c, void *buf, size_t count, ts_dtype dtype, int src, int tag,
                  ts_comm_req **req);

/* Advances req without blocking; *done = 1 once it has completed (results in place; a MEAN's
 * division and a bf16/f16 stage are done inside this call). Cheap: call it between kernels. */
int ts_comm_test(ts_comm_req *req, int *done);
/* Blocks until req completes, or the timeout (counted from this call) expires: TS_ECOMM, req
 * still valid and in flight (the caller may wait again or abort). */
int ts_comm_wait(ts_comm_req *req);
/* Waits for every request (NULL entries skipped); the first failure is returned. */
int ts_comm_wait_all(ts_comm_req **reqs, int n);
/* Releases a request. A request still in flight is handed to the library (its buffers must stay
 * valid until ts_comm_finalize) and its communicator is marked failed. NULL is ignored. */
void ts_comm_req_free(ts_comm_req *req);

#ifdef __cplusplus
}
#endif
#endif
