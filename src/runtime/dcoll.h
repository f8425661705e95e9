/* Internal: collectives on device buffers (dcoll.c), the communicator interface the GPU layouts
 * use (issue #29), over an MPI communicator of the job:
 *   - NCCL where every rank of the communicator has a GPU of its own (device/nccl.h), the
 *     communicator bootstrapped over MPI (rank 0's unique id broadcast);
 *   - MPI staged through pinned host memory otherwise (ranks sharing a GPU: NCCL refuses two
 *     ranks on one device), in chunks, each chunk's device->host copy, MPI collective and
 *     host->device copy overlapped with the next chunk's on a copy stream;
 *   - MPI directly on a CPU device (its buffers are host memory).
 * The choice is automatic (TS__DCOLL_AUTO) or forced (parallel.comm_backend), and said by
 * ts__dcoll_describe. Calls take the stream the data was produced on (NULL: compute) and leave
 * the result ordered on it: NCCL enqueues there; the staged path waits for it, and returns with
 * the result in place.
 *
 *   ts__dcoll *x;  ts__dcoll_create(world, dev, TS__DCOLL_AUTO, &x);      // collective
 *   ts__dcoll_allreduce(x, g, g, n, TS_F32, TS_REDUCE_SUM, NULL);
 *   ts__dcoll_free(x);
 */
#ifndef TS_RUNTIME_DCOLL_H
#define TS_RUNTIME_DCOLL_H

#include <stddef.h>

#include "tessera/comm.h"
#include "tessera/ops.h"
#include "device/dev.h"

typedef enum { TS__DCOLL_AUTO = 0, TS__DCOLL_NCCL = 1, TS__DCOLL_MPI = 2 } ts__dcoll_backend;

typedef struct ts__dcoll ts__dcoll;

/* "auto", "nccl", "mpi" (parallel.comm_backend's values); -1 for another name. */
int ts__dcoll_backend_parse(const char *s);
const char *ts__dcoll_backend_name(ts__dcoll_backend b);

/* Device collectives over c for this rank's device d (collective over c: every rank calls it
 * with its own device and the same `want`). AUTO: NCCL when every rank's device is a GPU of its
 * own and NCCL loads and starts on all, else staged MPI (the reason kept for describe). NCCL:
 * refused (TS_ECONFIG, on every rank) when two ranks share a GPU (naming them) or NCCL is missing
 * on a rank (naming it and why). MPI: staged MPI (direct on a CPU device). c stays the caller's
 * and must outlive the object. */
int ts__dcoll_create(ts_comm *c, ts__dev *d, ts__dcoll_backend want, ts__dcoll **out);
void ts__dcoll_free(ts__dcoll *x);
/* This rank's place in the group and the group's size (the communicator's). */
int ts__dcoll_rank(const ts__dcoll *x);
int ts__dcoll_size(const ts__dcoll *x);
/* The backend in use: TS__DCOLL_NCCL or TS__DCOLL_MPI. */
ts__dcoll_backend ts__dcoll_backend_of(const ts__dcoll *x);
/* One line: "NCCL 2.28.3, 2 ranks, one GPU each" / "MPI staged through pinned host memory
 * (ranks 0 and 1 share GPU 0)" / "MPI (CPU buffers)". */
const char *ts__dcoll_describe(const ts__dcoll *x);
/* The staged path's chunk: bytes of each of its two pinned buffers (default 4 MiB; tests make it
 * small to cross chunk boundaries). TS_EINVAL below 256. */
int ts__dcoll_set_stage_bytes(ts__dcoll *x, size_t bytes);
/* Its asynchronous failure (NCCL's: a peer died), TS_OK when none. */
int ts__dcoll_check(ts__dcoll *x);
/* Waits on the host for the work queued on stream s so far (NULL: compute), as the MPI watchdog
 * waits for a blocking collective: NCCL's is polled (its event, its asynchronous error) for at
 * most `timeout` seconds (0: for ever); past it, or on NCCL's error, the communicator is aborted
 * (every later call fails) and TS_ECOMM says which collective of how many ranks did not finish.
 * The staged path and the CPU finish inside their calls: a stream synchronisation. */
int ts__dcoll_wait(ts__dcoll *x, ts__dev_stream *s, double timeout, const char *what);

/* The collectives of tessera/comm.h on device buffers, same arguments and in-place rules
 * (count: each rank's block for allgather, reduce_scatter and alltoall), on stream s. dt: f32,
 * bf16, f16, i32, i64, u8. Results are bitwise the same on every rank; NCCL's and MPI's may
 * differ in the last bit of a float sum (their orders differ). */
int ts__dcoll_allreduce(ts__dcoll *x, const void *send, void *recv, size_t count, ts_dtype dt, ts_reduce_op op,
                        ts__dev_stream *s);
int ts__dcoll_allgather(ts__dcoll *x, const void *send, void *recv, size_t count, ts_dtype dt, ts__dev_stream *s);
int ts__dcoll_reduce_scatter(ts__dcoll *x, const void *send, void *recv, size_t count, ts_dtype dt, ts_reduce_op op,
                             ts__dev_stream *s);
int ts__dcoll_broadcast(ts__dcoll *x, void *buf, size_t count, ts_dtype dt, int root, ts__dev_stream *s);
int ts__dcoll_alltoall(ts__dcoll *x, const void *send, void *recv, size_t count, ts_dtype dt, ts__dev_stream *s);
/* One message each way between this rank and `peer` (both call it, each with the other's rank:
 * a pipeline's activations forward, gradients back); either count may be 0 (send only, receive
 * only). */
int ts__dcoll_sendrecv(ts__dcoll *x, const void *send, size_t send_count, void *recv, size_t recv_count, ts_dtype dt,
                       int peer, ts__dev_stream *s);

#endif
