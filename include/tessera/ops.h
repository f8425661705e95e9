/* Tessera ops vocabulary: the op kinds (ops.def) and the algorithm enums that op attributes,
 * kernels and collectives share. Below graph/, kernels/ and comm/, so a kernel can name its
 * algorithm without knowing graphs. */
#ifndef TESSERA_OPS_H
#define TESSERA_OPS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
#define X(e, name, fam) TS_OP_##e,
#include "tessera/ops.def"
#undef X
  TS_OP_COUNT
} ts_op;

typedef enum {
  TS_ELT_RELU = 0, TS_ELT_GELU_TANH, TS_ELT_GELU_ERF, TS_ELT_SIGMOID, TS_ELT_TANH,
  TS_ELT_EXP, TS_ELT_LOG, TS_ELT_SQRT, TS_ELT_SQUARE, TS_ELT_ABS, TS_ELT_NEG,
  TS_ELT_COUNT
} ts_eltwise_alg;
typedef enum { TS_BIN_ADD = 0, TS_BIN_SUB, TS_BIN_MUL, TS_BIN_DIV, TS_BIN_COUNT } ts_binary_alg;
typedef enum { TS_RED_SUM = 0, TS_RED_MEAN, TS_RED_MAX, TS_RED_COUNT } ts_reduce_alg;

/* Reductions of collectives (comm.h) and of collective graph ops. */
typedef enum {
  TS_REDUCE_SUM = 0,
  TS_REDUCE_MEAN = 1,
  TS_REDUCE_MAX = 2,
  TS_REDUCE_MIN = 3,
  TS_REDUCE_COUNT
} ts_reduce_op;

#ifdef __cplusplus
}
#endif
#endif
