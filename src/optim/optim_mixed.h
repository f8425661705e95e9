/* Internal: the optimizer's entries for the distribution layer (src/optim/optim.c). */
#ifndef TS_OPTIM_MIXED_H
#define TS_OPTIM_MIXED_H

#include "tessera/optim.h"
#include "tessera/tensor.h"

/* ts_optim_step_segments where segment s's gradients are gp[s] in dtype gdt[s] (f32, bf16 or
 * f16), each multiplied by gscale as it is read (widened into a scratch of 64 Ki floats owned by
 * the optimizer, chunk by chunk): ZeRO's mixed precision, the rank's reduced 16-bit gradient parts
 * updating its f32 master weights, the loss scale's and the clipping's factor applied on the way.
 * Bitwise ts_optim_step_segments on the widened, scaled gradients. SGD, Momentum, Adam and AdamW
 * (TS_EINVAL for LAMB, whose trust ratios need the whole gradients). */
int ts__optim_step_mixed(ts_optim *o, float *const *pp, const void *const *gp, const ts_dtype *gdt, float gscale,
                         float lr);

/* LAMB's norm reduction (ts_optim_set_norm_reduce) run on sums[0..n) as the optimizer's step would
 * (a device computing the sums itself); 0 without one (*none set to 1), or its status. sums NULL:
 * only *none said, nothing run. */
int ts__optim_reduce_norms(ts_optim *o, double *sums, int n, int *none);

#endif
