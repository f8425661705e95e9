/* Tessera operator shard strategies (MindSpore's `shard`), and the sharding rules that turn an
 * operator's strategy into its inputs' and output's tensor layouts.
 *
 * A STRATEGY for an operator with k tensor inputs gives, for each input, how many parts each of
 * its dimensions is cut into, as MindSpore writes it: MatMul.shard(((2, 1), (1, 4))) cuts a's
 * rows in 2 and b's columns in 4. Cuts are >= 1; the product of an input's cuts must divide the
 * device count (the rest of the devices hold repeated copies: data parallel over them). Inputs
 * that are not tensors (attributes) have no entry.
 *
 * The layouts follow from the strategy and the op's sharding rule (include/tessera/layout.h for
 * device matrices and tensor maps). */
#ifndef TESSERA_STRATEGY_H
#define TESSERA_STRATEGY_H

#include "tessera/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most tensor inputs an operator strategy describes. */
#define TS_STRATEGY_MAX_INPUTS 8

typedef struct {
  int ninputs;                                    /* tensor inputs described, 0..TS_STRATEGY_MAX_INPUTS */
  int ndim[TS_STRATEGY_MAX_INPUTS];               /* dimensions of each input */
  int64_t cuts[TS_STRATEGY_MAX_INPUTS][TS_MAX_DIMS]; /* parts each dimension is cut into (>= 1) */
} ts_op_strategy;

#ifdef __cplusplus
}
#endif

#endif
