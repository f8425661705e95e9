// test_cuda_abi's NCCL part (src/device/nccl_abi.h against nccl.h and libnccl), where the toolkit
// has nccl.h (CUDA 13's does; a PyTorch environment's is in its nvidia/nccl wheel).
#include <cstdio>

#include "abi_check.h"

#if __has_include(<nccl.h>)
#include <dlfcn.h>
#include <nccl.h>

#include "device/nccl_abi.h"

void check_nccl(abi_report *r, void *lib) {
#define F(member, sym)                                                                                                \
  r->check(same_abi((decltype(ts__nccl_api::member)) nullptr, (decltype(&sym)) nullptr),                             \
           #sym ": Tessera's declaration differs from nccl.h's");                                                    \
  r->symbol(lib, #sym);
  TS__NCCL_SYMBOLS(F)
#undef F
  r->check(sizeof(ncclUniqueId) == sizeof(ts__nccl_id_t) && TS__NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES,
           "ncclUniqueId's size");
  r->check(sizeof(ncclResult_t) == sizeof(ts__nccl_result) && (int)TS__NCCL_SUCCESS == (int)ncclSuccess &&
               (int)TS__NCCL_IN_PROGRESS == (int)ncclInProgress,
           "ncclResult_t values");
  r->check((int)TS__NCCL_SUM == (int)ncclSum && (int)TS__NCCL_MAX == (int)ncclMax && (int)TS__NCCL_MIN == (int)ncclMin &&
               (int)TS__NCCL_AVG == (int)ncclAvg && sizeof(ncclRedOp_t) == sizeof(int),
           "ncclRedOp_t values");
  r->check((int)TS__NCCL_UINT8 == (int)ncclUint8 && (int)TS__NCCL_INT32 == (int)ncclInt32 &&
               (int)TS__NCCL_INT64 == (int)ncclInt64 && (int)TS__NCCL_FLOAT16 == (int)ncclFloat16 &&
               (int)TS__NCCL_FLOAT32 == (int)ncclFloat32 && (int)TS__NCCL_BFLOAT16 == (int)ncclBfloat16 &&
               sizeof(ncclDataType_t) == sizeof(int),
           "ncclDataType_t values");
  std::printf("NCCL: checked against nccl.h of %d.%d.%d\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
}
#else
void check_nccl(abi_report *r, void *lib) {
  (void)lib;
  r->note("no nccl.h with this toolkit: NCCL's declarations unchecked");
}
#endif
