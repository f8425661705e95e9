// The driver half of test_cuda_abi (test_cuda_abi.cpp): Tessera's CUDA driver API declarations
// (src/device/cuda_api.h) against NVIDIA's cuda.h, which is included in a namespace of its own
// here because Tessera's header spells the same type names its own way (CUresult as int).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace nv {
#include <cuda.h>
}
#include "device/cuda_api.h"
#include "abi_check.h"

#define XSTR(x) STR(x)
#define STR(x) #x

void check_driver(abi_report *r) {
  // each member's prototype against the one cuda.h declares for the symbol loaded (where cuda.h
  // maps the name to a newer one, its prototype: the same where Tessera's stays right)
#define F(member, sym)                                                                                                \
  r->check(same_abi((decltype(ts__cuda_fns::member)) nullptr, (decltype(&nv::sym)) nullptr),                         \
           #sym ": Tessera's declaration differs from cuda.h's");                                                    \
  r->symbol(r->libcuda, #sym);                                                                                       \
  if (std::strcmp(#sym, XSTR(sym))) r->note(#sym " (cuda.h now calls it " XSTR(sym) ")");
  TS__CUDA_SYMBOLS(F)
#undef F
  r->check((int)TS__CU_ATTR_SM_COUNT == (int)nv::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT &&
               (int)TS__CU_ATTR_CC_MAJOR == (int)nv::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR &&
               (int)TS__CU_ATTR_CC_MINOR == (int)nv::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
           "CUdevice_attribute values");
  r->check((int)TS__CU_STREAM_NON_BLOCKING == (int)nv::CU_STREAM_NON_BLOCKING &&
               (int)TS__CU_EVENT_DEFAULT == (int)nv::CU_EVENT_DEFAULT &&
               (int)TS__CU_EVENT_DISABLE_TIMING == (int)nv::CU_EVENT_DISABLE_TIMING,
           "stream and event flags");
  r->check((int)TS__CU_JIT_ERROR_LOG_BUFFER == (int)nv::CU_JIT_ERROR_LOG_BUFFER &&
               (int)TS__CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES == (int)nv::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
           "CUjit_option values");
  r->check(sizeof(CUresult) == sizeof(nv::CUresult) && sizeof(CUdeviceptr) == sizeof(nv::CUdeviceptr) &&
               sizeof(CUdevice) == sizeof(nv::CUdevice),
           "CUresult, CUdeviceptr, CUdevice sizes");
}
