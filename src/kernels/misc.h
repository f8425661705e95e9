/* Misc-family kernels: constant fill, dtype cast, copy (see shape.h for ts__copy_ref). */
#ifndef TS_KERNELS_MISC_H
#define TS_KERNELS_MISC_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/tensor.h"

/* y (n elements of dtype dt) = value converted to dt (ints truncate toward zero, saturating). */
int ts__fill_ref(void *y, ts_dtype dt, size_t n, float value);
/* y (n, ddt) = convert(x (n, sdt)): ts_convert semantics (round to nearest even for floats,
 * truncation and saturation for ints), run in parallel chunks; f32<->bf16/f16 use inline
 * vectorisable loops with the same rounding. */
int ts__cast_ref(const void *x, ts_dtype sdt, void *y, ts_dtype ddt, size_t n);

#endif
