/* Internal: NCCL, NVIDIA's collectives between GPUs, loaded at run time like the driver
 * (nccl.c): TESSERA_LIBNCCL (that file only), else libnccl.so.2 on the loader's path (a PyTorch environment's
 * nvidia/nccl/lib: scripts/gpu-check.sh puts it there). One communicator per group of ranks,
 * each rank on its own GPU (NCCL refuses two ranks of a communicator on one GPU); its calls are
 * enqueued on a stream of the rank's device and return before the data moved. The bootstrap (the
 * unique id made by one rank and given to the others) is the caller's: runtime/dcoll.c does it
 * over MPI.
 *
 *   unsigned char id[TS__NCCL_ID_BYTES];
 *   if (rank == 0) ts__nccl_unique_id(id);
 *   ...broadcast id...
 *   ts__nccl *c;  ts__nccl_comm_init(dev, nranks, id, rank, &c);
 *   ts__nccl_allreduce(c, x, x, n, TS_F32, TS_REDUCE_SUM, NULL);   // on dev's compute stream
 *   ts__nccl_comm_free(c);
 */
#ifndef TS_DEVICE_NCCL_H
#define TS_DEVICE_NCCL_H

#include <stddef.h>

#include "tessera/ops.h"
#include "tessera/tensor.h"
#include "device/dev.h"

#define TS__NCCL_ID_BYTES 128

typedef struct ts__nccl ts__nccl;

/* 1 when NCCL loads (at the first call, once per process); else 0 and ts__nccl_why() says why
 * ("NCCL not found (libnccl.so.2 or TESSERA_LIBNCCL)", a missing entry point). */
int ts__nccl_available(void);
const char *ts__nccl_why(void);
/* "2.28.3", or "" when NCCL is not available. */
const char *ts__nccl_version(void);
/* A new unique id (ncclGetUniqueId) into id. TS_EUNSUPPORTED without NCCL, TS_EBACKEND. */
int ts__nccl_unique_id(unsigned char id[TS__NCCL_ID_BYTES]);
/* This rank's communicator of nranks on GPU device d (collective over the nranks processes
 * given the same id). TS_EINVAL for a CPU device, TS_EUNSUPPORTED without NCCL, TS_EBACKEND with
 * NCCL's message. */
int ts__nccl_comm_init(ts__dev *d, int nranks, const unsigned char id[TS__NCCL_ID_BYTES], int rank, ts__nccl **out);
/* ncclCommDestroy (waits for the communicator's work); NULL is fine. */
void ts__nccl_comm_free(ts__nccl *c);
/* ncclCommAbort: ends it without waiting for the peers (a failed job). */
void ts__nccl_comm_abort(ts__nccl *c);
/* The communicator's asynchronous error (a peer died, a network failure), TS_OK when none. */
int ts__nccl_check(ts__nccl *c);

/* The collectives on device pointers, enqueued on stream s (NULL: d's compute stream). dt: f32,
 * bf16, f16, i32, i64, u8 (sum/max/min; op TS_REDUCE_MEAN is NCCL's average). count is each
 * rank's element count for allgather and reduce_scatter (recv of allgather and send of
 * reduce_scatter hold size x count). In place where NCCL allows it (send == recv, or the rank's
 * block of the whole buffer). TS_EDTYPE, TS_EINVAL, TS_EBACKEND with NCCL's text and the op. */
int ts__nccl_allreduce(ts__nccl *c, const void *send, void *recv, size_t count, ts_dtype dt, ts_reduce_op op,
                       ts__dev_stream *s);
int ts__nccl_allgather(ts__nccl *c, const void *send, void *recv, size_t count, ts_dtype dt, ts__dev_stream *s);
int ts__nccl_reduce_scatter(ts__nccl *c, const void *send, void *recv, size_t count, ts_dtype dt, ts_reduce_op op,
                            ts__dev_stream *s);
int ts__nccl_broadcast(ts__nccl *c, void *buf, size_t count, ts_dtype dt, int root, ts__dev_stream *s);
/* Point to point; several between ts__nccl_group_begin and _end progress together (a pair that
 * exchanges both ways must be in one group, as NCCL requires). */
int ts__nccl_send(ts__nccl *c, const void *buf, size_t count, ts_dtype dt, int peer, ts__dev_stream *s);
int ts__nccl_recv(ts__nccl *c, void *buf, size_t count, ts_dtype dt, int peer, ts__dev_stream *s);
int ts__nccl_group_begin(void);
int ts__nccl_group_end(void);

#endif
