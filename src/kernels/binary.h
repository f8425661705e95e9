/* Binary element-wise ops with NumPy broadcasting, and y = alpha*x + beta (f32, contiguous).
 *
 * Shapes follow NumPy: a and b are aligned on their last dims; each dim must equal y's or be 1
 * (missing leading dims count as 1). The broadcast engine collapses the problem to at most a few
 * dims (size-1 dims dropped, adjacent dims merged where both operands stay linear), so that the
 * innermost loop runs over a contiguous or constant operand and vectorises. */
#ifndef TS_KERNELS_BINARY_H
#define TS_KERNELS_BINARY_H

#include <stdint.h>
#include "tessera/tensor.h"

/* Algorithms: ts_binary_alg (ADD=0 SUB=1 MUL=2 DIV=3) plus internal ones used by other kernels. */
#define TS__BIN_COPY 16 /* y = a (broadcast); b is ignored */
#define TS__BIN_EQ 17   /* y = (a == b) ? 1 : 0 */

typedef struct {
  int nd; /* >= 1 */
  int64_t dims[TS_MAX_DIMS];
  int64_t sa[TS_MAX_DIMS], sb[TS_MAX_DIMS]; /* element strides per output dim; 0 = broadcast */
} ts__bcast;

/* Plans y = f(a, b). TS_ESHAPE if a or b does not broadcast to y. */
int ts__bcast_plan(const ts_shape *a, const ts_shape *b, const ts_shape *y, ts__bcast *p);

// a (as), b (bs) broadcast to y (ys). y may alias a or b when that operand has y's shape.
int ts__binary_ref(int alg, const float *a, const ts_shape *as, const float *b,
                   const ts_shape *bs, float *y, const ts_shape *ys);
/* oneDNN binary when a has y's shape (or b does and alg is commutative); otherwise it falls
 * back to the reference kernel. */
int ts__binary_dnnl(int alg, const float *a, const ts_shape *as, const float *b,
                    const ts_shape *bs, float *y, const ts_shape *ys);
// x (n) -> y (n) = alpha*x + beta; in place allowed
int ts__scale_ref(const float *x, float *y, int64_t n, float alpha, float beta);

/* 16-bit variants (dt TS_BF16 or TS_F16 for a, b, y), f32 arithmetic, y rounded once. Operands
 * of y's shape run native vectorised loops (16-bit reads and writes: the residual add, gating
 * mul); a broadcasting operand makes f32 copies around the broadcast engine. */
// a (as) dt, b (bs) dt broadcast to y (ys) dt
int ts__binary_lp(int alg, ts_dtype dt, const void *a, const ts_shape *as, const void *b,
                  const ts_shape *bs, void *y, const ts_shape *ys);
// x (n) dt -> y (n) dt = alpha*x + beta
int ts__scale_lp(ts_dtype dt, const void *x, void *y, int64_t n, float alpha, float beta);

#endif
