/* Tessera operator sharding rules: from an operator's strategy (include/tessera/strategy.h) and
 * the device count, the device matrix and the layouts of its inputs and of its output, derived as
 * MindSpore's operator-level parallelism does (docs/layout.md, "Sharding rules").
 *
 * The construction, for every op:
 *  - the op has LOOP AXES, one per independent dimension of its computation (matmul: m, k, n);
 *    the strategy gives each one's cut, and inputs sharing a loop axis must cut it equally;
 *  - the device matrix is the loop axes' cuts in the op's order, preceded by a REPEAT axis of
 *    ndevices / (product of the cuts) when that is > 1 (the devices computing the same piece,
 *    data-parallel copies; MindSpore places it first). Axes of cut 1 stay in the matrix, as in
 *    MindSpore, so a loop axis keeps its position whatever the strategy;
 *  - each tensor's map names the loop axis of each dimension (-1 for a dimension of size 1 that
 *    broadcasts, or one that no loop axis may cut, e.g. conv's input channels);
 *  - the output's map follows from the loop axes it keeps; a loop axis of cut > 1 that the op
 *    sums over (matmul's k, a reduced axis, embedding's vocabulary, cross-entropy's rows) makes
 *    the output PARTIAL over it. Such an output needs an ALLREDUCE or REDUCE_SCATTER
 *    (ts_redist_plan_make) before it is used as a full value. (Cross-entropy's class axis is the
 *    exception: the op settles it with its own collectives, so the loss is replicated over it.)
 *
 * Everything is pure computation: nothing allocated, nothing printed. Errors are refused before
 * anything runs, with a message (ts_last_error()) naming the op, the input, the dimension and
 * the sizes at fault. */
#ifndef TS_PARALLEL_SHARDING_H
#define TS_PARALLEL_SHARDING_H

#include "tessera/strategy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  TS_SHARD_MATMUL = 0,  /* a (M,K) x b (K,N) -> (M,N); strategy ((m,k),(k,n)); loop axes (m, k, n);
                           output map(m,n), partial over k; attrs unused */
  TS_SHARD_DENSE,       /* x (...,IN), w (OUT,IN) [, b (OUT)] -> (...,OUT), y = x w^T [+ b];
                           strategy ((b...,k),(o,k)[,(o)]); loop axes (x's leading dims..., k, o);
                           output map(lead..., o), partial over k. The bias is cut like w's OUT
                           (o). When k > 1 the bias must be added AFTER the partial sums are
                           reduced (the parallel pass does; adding it on every rank would count
                           it k times). attrs unused */
  TS_SHARD_ELEMENTWISE, /* unary x -> same shape; strategy of x; attrs unused */
  TS_SHARD_BINARY,      /* a, b with numpy broadcasting -> broadcast shape; attrs unused */
  TS_SHARD_REDUCE,      /* x -> x reduced over axes; attrs {axes bit mask, keepdims, kind}
                           (kind 0 sum, 1 mean, 2 max/min); attrs NULL = all axes, no keepdims,
                           sum */
  TS_SHARD_SOFTMAX,     /* x -> same shape; attrs {axis} (negative from the end; NULL = -1) */
  TS_SHARD_LAYERNORM,   /* x [, gamma, beta] (shape x.shape[begin:]) -> x's shape;
                           attrs {begin_norm_axis} (negative from the end; NULL = -1) */
  TS_SHARD_EMBEDDING,   /* ids (...), table (V,D) -> (...,D); strategy ((b...),(v,d)) */
  TS_SHARD_CONV2D,      /* x (N,C,H,W), w (O,C,KH,KW) -> (N,O,OH,OW);
                           strategy ((n,c,h,w),(o,c,1,1)); loop axes (N, C, O, H, W);
                           output map(n,o,h,w), partial over C (input channels are summed;
                           the bias is added after the reduction, as dense's). A cut of H or
                           W gives each rank a band of output rows (columns) and its input
                           band; the parallel pass adds the neighbours' halo rows with a HALO
                           op (ts_conv2d_halo). The kernel is not cut. attrs {stride_h,
                           stride_w, pad_h, pad_w} (NULL = 1,1,0,0) */
  TS_SHARD_BATCHNORM,   /* x (N,C,...) [, gamma, beta, mean, var (C)] -> x's shape;
                           strategy ((n,c,1,...)[,(c),(c),(c),(c)]); loop axes (n, c); output
                           x's map(n,c,-1,...). Spatial dims are not cut. Statistics are per
                           channel, so a channel cut needs no communication; when n > 1 the pass
                           synchronises the statistics over the n axis (SyncBatchNorm: allreduce
                           of the per-channel sums). attrs unused */
  TS_SHARD_ATTENTION,   /* q, k, v (B,H,T,D), the same shape -> o (B,H,T,D) (causal attention,
                           whole heads); strategy ((b,h,t,1),(b,h,t,1),(b,h,t,1)); loop axes
                           (b, h), and t when t > 1 (then (b, t, h): the sequence's axis before
                           the heads'), cut alike by all three; D is not cut. Output
                           map(b,h,t,-1). A sequence cut runs as ring attention (the pass emits
                           RING_ATTENTION over its axis); else no communication. attrs {layout}
                           (NULL: 0): 1 = q, k, v and o (B,T,H,D), the dims read accordingly */
  TS_SHARD_SOFTMAX_CE,  /* logits (N,C), labels (N) -> the mean loss, a 0-dim scalar;
                           strategy ((n,c),(n)); loop axes (n, c). Output PARTIAL over n when
                           n > 1 (each rank's value is the mean over its rows divided by n, so
                           the sum over the n group is the global mean), and replicated over c:
                           a class cut is settled inside the op by collectives over the c axis
                           (Megatron's vocabulary-parallel cross-entropy: allreduce max, sum of
                           exps and target logit). attrs unused */
  TS_SHARD_POOL,        /* x (N,C,H,W) -> (N,C,OH,OW), max/avg/global-average pooling;
                           strategy ((n,c,1,1),); loop axes (n, c); output map(n,c,-1,-1).
                           A global average (attrs[2] = 1) may also cut H and W (loop axes
                           (n, c, h, w)): each rank averages its band, the output is partial
                           over h and w (the pass scales it by 1/(h w)). Windowed pooling's
                           spatial dims are not cut. attrs {OH, OW, global} (the output's
                           spatial size; NULL = 1,1,0) */
  TS_SHARD_OP_COUNT
} ts_shard_op;

/* The halo of a convolution's spatial dim of size `in` (kernel k, stride, pad) cut in `cut`
 * bands: each rank's input band of in/cut rows needs *lo rows of the previous band before it
 * and *hi rows of the next after it (zeros at the ends stand for the padding), then runs the
 * kernel with no padding on that dim. Needs out = (in + 2 pad - k)/stride + 1 divisible by the
 * cut and out * stride == in (each input band is its output band times the stride); bands at
 * least as thick as the halo. TS_EUNSUPPORTED with the reason (completing "x dim d ...");
 * cut 1: lo = hi = 0. */
int ts_conv2d_halo(int64_t in, int64_t k, int stride, int pad, int64_t cut, int *lo, int *hi);

/* Lower-case name of op ("matmul", "dense", ...), "?" if invalid. */
const char *ts_shard_op_name(ts_shard_op op);

/* The sharding rule of `op`. Inputs: the strategy s (s->ninputs == nin, s->ndim[i] ==
 * in_shapes[i].ndim), the device count ndevices >= 1, the nin global input shapes and the op's
 * attributes (see ts_shard_op; may be NULL). Outputs: in_layouts[0..nin-1], *out_layout and, if
 * out_shape is not NULL, the output's global shape; all on the same device matrix (see the top
 * of this file). Every layout fits its shape (ts_layout_check_shape).
 * Refused (outputs untouched): TS_EINVAL for a bad op, a NULL argument, a wrong number of inputs
 * or of strategy dimensions, a cut < 1, attributes out of range, or cuts whose product does not
 * divide ndevices; TS_ESHAPE for shapes the op does not accept (matmul's K differs, ...) or a cut
 * that does not divide its dimension; TS_EUNSUPPORTED for cuts the op forbids (a normalised axis,
 * conv's channels or spatial dims, attention's D, a broadcast dimension of size 1, a max
 * over a cut axis) or shared dimensions cut differently (matmul's k, attention's B, H and T across
 * q, k, v, labels' N against logits', a bias or batchnorm parameter against its channel axis);
 * TS_ERANGE if the device matrix would need more than TS_LAYOUT_MAX_AXES axes. */
int ts_shard_rule(ts_shard_op op, const ts_op_strategy *s, int ndevices, const ts_shape *in_shapes,
                  int nin, const int *attrs, ts_layout *in_layouts, ts_layout *out_layout,
                  ts_shape *out_shape);

#ifdef __cplusplus
}
#endif
#endif
