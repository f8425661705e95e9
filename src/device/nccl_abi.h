/* The part of NCCL's C ABI Tessera uses (nccl.h of NCCL 2.x, unchanged since 2.7 for these),
 * declared here because no CUDA install is needed to build: the communicator opaque, enums as
 * int, the unique id as its 128 bytes, streams as pointers. src/device/nccl.c loads these at run
 * time; tests/device/test_cuda_abi.cpp checks them against NVIDIA's header and library where
 * installed. */
#ifndef TS_DEVICE_NCCL_ABI_H
#define TS_DEVICE_NCCL_ABI_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int ts__nccl_result; /* ncclResult_t: ncclSuccess 0 */
typedef struct ts__nccl_comm_st *ts__nccl_comm_t;
#define TS__NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */
typedef struct {
  char internal[TS__NCCL_ID_BYTES];
} ts__nccl_id_t;
enum {
  TS__NCCL_SUCCESS = 0,       /* ncclSuccess */
  TS__NCCL_IN_PROGRESS = 7,   /* ncclInProgress */
  TS__NCCL_SUM = 0,           /* ncclRedOp_t ncclSum */
  TS__NCCL_MAX = 2,           /* ncclMax */
  TS__NCCL_MIN = 3,           /* ncclMin */
  TS__NCCL_AVG = 4,           /* ncclAvg (NCCL >= 2.10) */
  TS__NCCL_UINT8 = 1,         /* ncclDataType_t ncclUint8 */
  TS__NCCL_INT32 = 2,         /* ncclInt32 */
  TS__NCCL_INT64 = 4,         /* ncclInt64 */
  TS__NCCL_FLOAT16 = 6,       /* ncclFloat16 */
  TS__NCCL_FLOAT32 = 7,       /* ncclFloat32 */
  TS__NCCL_BFLOAT16 = 9       /* ncclBfloat16 (NCCL >= 2.10) */
};

typedef struct {
  ts__nccl_result (*GetVersion)(int *version);
  ts__nccl_result (*GetUniqueId)(ts__nccl_id_t *id);
  ts__nccl_result (*CommInitRank)(ts__nccl_comm_t *comm, int nranks, ts__nccl_id_t id, int rank);
  ts__nccl_result (*CommDestroy)(ts__nccl_comm_t comm);
  ts__nccl_result (*CommAbort)(ts__nccl_comm_t comm);
  ts__nccl_result (*CommGetAsyncError)(ts__nccl_comm_t comm, ts__nccl_result *err);
  const char *(*GetErrorString)(ts__nccl_result r);
  ts__nccl_result (*AllReduce)(const void *send, void *recv, size_t count, int dtype, int op, ts__nccl_comm_t comm,
                               void *stream);
  ts__nccl_result (*AllGather)(const void *send, void *recv, size_t sendcount, int dtype, ts__nccl_comm_t comm,
                               void *stream);
  ts__nccl_result (*ReduceScatter)(const void *send, void *recv, size_t recvcount, int dtype, int op,
                                   ts__nccl_comm_t comm, void *stream);
  ts__nccl_result (*Broadcast)(const void *send, void *recv, size_t count, int dtype, int root, ts__nccl_comm_t comm,
                               void *stream);
  ts__nccl_result (*Send)(const void *send, size_t count, int dtype, int peer, ts__nccl_comm_t comm, void *stream);
  ts__nccl_result (*Recv)(void *recv, size_t count, int dtype, int peer, ts__nccl_comm_t comm, void *stream);
  ts__nccl_result (*GroupStart)(void);
  ts__nccl_result (*GroupEnd)(void);
} ts__nccl_api;

/* each member and the symbol loaded into it */
#define TS__NCCL_SYMBOLS(F)                                                                                           \
  F(GetVersion, ncclGetVersion) F(GetUniqueId, ncclGetUniqueId) F(CommInitRank, ncclCommInitRank)                   \
  F(CommDestroy, ncclCommDestroy) F(CommAbort, ncclCommAbort) F(CommGetAsyncError, ncclCommGetAsyncError)           \
  F(GetErrorString, ncclGetErrorString) F(AllReduce, ncclAllReduce) F(AllGather, ncclAllGather)                     \
  F(ReduceScatter, ncclReduceScatter) F(Broadcast, ncclBroadcast) F(Send, ncclSend) F(Recv, ncclRecv)               \
  F(GroupStart, ncclGroupStart) F(GroupEnd, ncclGroupEnd)

#ifdef __cplusplus
}
#endif
#endif
