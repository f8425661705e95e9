/* Tessera graph IR and builder API.
 *
 * Builders only record: nothing runs when an op is added. Shapes and dtypes are inferred at
 * once; an invalid op records a sticky error on the graph (the first one wins), returns
 * TS_NONE, and every later builder fed TS_NONE returns TS_NONE too, so a model can be built
 * without checking each call and checked once with ts_graph_status():
 *
 * Usage (compiled by tests/tools/header_examples_test.sh):
 *   ts_graph *g; ts_graph_create(&g);
 *   ts_val x = ts_input(g, "x", TS_F32, ts_shape2(64, 784));
 *   ts_val w1 = ts_input(g, "w1", TS_F32, ts_shape2(128, 784)), b1 = ts_input(g, "b1", TS_F32, ts_shape1(128));
 *   ts_val h = ts_relu(g, ts_dense(g, x, w1, b1));
 *   if (ts_graph_status(g)) fprintf(stderr, "%s\n", ts_graph_error(g));
 *
 * Values are small integers (ts_val) owned by their graph; passing a value from another graph
 * is detected (values carry the graph's id in their high bits). */
#ifndef TESSERA_GRAPH_H
#define TESSERA_GRAPH_H

#include "tessera/ops.h"
#include "tessera/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t ts_val;
#define TS_NONE ((ts_val)-1)

typedef struct ts_graph ts_graph;

/* Communicator slots an op may record (collectives, class-sharded cross-entropy,
 * SyncBatchNorm): 0..TS_GRAPH_MAX_COMM_SLOTS-1. A bound on the slot number (a sanity check of the
 * attribute), not a table size: a plan's table grows to the highest slot set (ts_plan_set_comm),
 * so a job may bind as many communicators as its groups need (TS_PLAN_MAX_COMMS). */
#define TS_GRAPH_MAX_COMM_SLOTS 65536


/* Kinds of values. */
typedef enum {
  TS_VAL_TEMP = 0,  /* produced by a node */
  TS_VAL_INPUT = 1, /* fed per step (batch, labels) */
  TS_VAL_PARAM = 2, /* trainable parameter, bound to a ts_params store */
  TS_VAL_STATE = 3, /* non-trainable persistent buffer (BatchNorm running stats) */
} ts_val_kind;


/* ---- graph lifetime and inspection ---- */
int ts_graph_create(ts_graph **out);
void ts_graph_free(ts_graph *g);
/* First error recorded while building (TS_OK if none) and its message. */
int ts_graph_status(const ts_graph *g);
const char *ts_graph_error(const ts_graph *g);
/* Training mode affects dropout and batch-norm (default 1). */
void ts_graph_set_training(ts_graph *g, int training);
/* Batch-norm ops built from now on compute their training statistics over the ranks of the
 * communicator the plan holds in `slot` (SyncBatchNorm); -1 (the default): each process's own
 * batch. Without a communicator in that slot at run time they use local statistics. */
void ts_graph_set_batchnorm_sync(ts_graph *g, int slot);
int ts_graph_num_nodes(const ts_graph *g);
int ts_graph_num_values(const ts_graph *g);
ts_shape ts_val_shape(const ts_graph *g, ts_val v);
ts_dtype ts_val_dtype(const ts_graph *g, ts_val v);
const char *ts_val_name(const ts_graph *g, ts_val v);
ts_val_kind ts_val_kind_of(const ts_graph *g, ts_val v);
/* Index of the node that produces v (-1 for leaves and invalid values). */
int ts_graph_producer(const ts_graph *g, ts_val v);
/* Name scope prefixed to node names ("layer1/conv"); push/pop like a stack. */
void ts_graph_push_scope(ts_graph *g, const char *scope);
void ts_graph_pop_scope(ts_graph *g);
/* Writes a readable listing of the graph (one node per line) to buf; returns bytes needed. */
size_t ts_graph_dump(const ts_graph *g, char *buf, size_t cap);

/* ---- leaves ---- */
ts_val ts_input(ts_graph *g, const char *name, ts_dtype dt, ts_shape shape);
/* A trainable parameter / persistent state value. `param_id` refers to a ts_params entry
 * (see nn.h); the executor binds it to the store's memory. */
ts_val ts_param_value(ts_graph *g, const char *name, ts_dtype dt, ts_shape shape, int param_id);
ts_val ts_state_value(ts_graph *g, const char *name, ts_dtype dt, ts_shape shape, int param_id);
int ts_val_param_id(const ts_graph *g, ts_val v);
ts_val ts_const(ts_graph *g, ts_dtype dt, ts_shape shape, float value);

/* ---- ops ---- */
ts_val ts_cast(ts_graph *g, ts_val x, ts_dtype dt);
ts_val ts_copy(ts_graph *g, ts_val x);
/* a (...,M,K) @ b (...,K,N); trans_* transpose the last two dims; batch dims must match, or
 * one side is 2-D and shared by every batch. */
ts_val ts_matmul(ts_graph *g, ts_val a, ts_val b, int trans_a, int trans_b);
/* x (...,in) -> (...,out) with w (out,in) and optional b (out) (TS_NONE for none). */
ts_val ts_dense(ts_graph *g, ts_val x, ts_val w, ts_val b);
/* x (N,C,H,W), w (O,C/groups,KH,KW), b (O) or TS_NONE -> (N,O,OH,OW). */
ts_val ts_conv2d(ts_graph *g, ts_val x, ts_val w, ts_val b, int stride_h, int stride_w,
                 int pad_h, int pad_w, int dil_h, int dil_w, int groups);
ts_val ts_maxpool2d(ts_graph *g, ts_val x, int kh, int kw, int sh, int sw, int ph, int pw);
/* Average pooling; padded elements are excluded from the divisor (count_include_pad=false). */
ts_val ts_avgpool2d(ts_graph *g, ts_val x, int kh, int kw, int sh, int sw, int ph, int pw);
/* (N,C,H,W) -> (N,C,1,1). */
ts_val ts_global_avgpool(ts_graph *g, ts_val x);
/* x (N,C,...) with gamma,beta (C) and running stats rmean,rvar (C, state values). The graph's
 * training flag at build time decides the mode. Training: batch statistics, and rmean/rvar are
 * updated in place when the node runs: running = (1-momentum)*running + momentum*batch
 * (unbiased var), as torch.nn.BatchNorm (needs more than 1 value per channel). Eval: rmean/rvar. */
ts_val ts_batchnorm(ts_graph *g, ts_val x, ts_val gamma, ts_val beta, ts_val rmean, ts_val rvar,
                    float momentum, float eps);
/* Normalises over the last dim (biased variance, like torch.nn.LayerNorm); gamma,beta (D). */
ts_val ts_layernorm(ts_graph *g, ts_val x, ts_val gamma, ts_val beta, float eps);
ts_val ts_eltwise(ts_graph *g, ts_val x, ts_eltwise_alg alg);
ts_val ts_relu(ts_graph *g, ts_val x);
ts_val ts_gelu(ts_graph *g, ts_val x, int tanh_approx);
ts_val ts_sigmoid(ts_graph *g, ts_val x);
ts_val ts_tanh(ts_graph *g, ts_val x);
/* Softmax / log-softmax along `axis` (negative counts from the end). */
ts_val ts_softmax(ts_graph *g, ts_val x, int axis);
ts_val ts_log_softmax(ts_graph *g, ts_val x, int axis);
/* Mean sparse softmax cross-entropy: logits (N,C), labels (N) i32/i64 -> scalar, as
 * torch.nn.CrossEntropyLoss(label_smoothing=s): labels equal to -100 are ignored and the mean is
 * over the other rows (0, not NaN, if every row is ignored). Other labels outside [0,C) make the
 * run fail with TS_ERANGE. */
ts_val ts_softmax_cross_entropy(ts_graph *g, ts_val logits, ts_val labels, float label_smoothing);
/* The same loss with the classes sharded over a group (Megatron's vocabulary-parallel loss;
 * docs/layout.md "Class-sharded cross-entropy"): logits (N, C/g) are this rank's block of columns
 * [class_offset, class_offset + C/g) of the global (N,C) logits (C = num_classes, divisible by
 * g = group_size, else TS_ESHAPE; slot 0..TS_GRAPH_MAX_COMM_SLOTS-1 as for the collectives below),
 * labels (N) are global class ids on every rank. The run communicates through the plan's
 * communicator in `slot` (exactly group_size ranks; group_size 1 runs without one): every rank
 * gets the loss of the full logits. Gradient: the collectives' convention (the objective is the
 * SUM of every rank's loss), so dloss is summed over the group and each rank gets its block of
 * the full dlogits for that total; weigh each rank's loss by 1/g for the single-process
 * objective. */
ts_val ts_softmax_cross_entropy_sharded(ts_graph *g, ts_val logits, ts_val labels,
                                        float label_smoothing, int slot, int group_size,
                                        int64_t class_offset, int64_t num_classes);
/* Element-wise a (op) b with NumPy broadcasting (either operand may broadcast). */
ts_val ts_binary(ts_graph *g, ts_val a, ts_val b, ts_binary_alg alg);
ts_val ts_add(ts_graph *g, ts_val a, ts_val b);
ts_val ts_sub(ts_graph *g, ts_val a, ts_val b);
ts_val ts_mul(ts_graph *g, ts_val a, ts_val b);
ts_val ts_div(ts_graph *g, ts_val a, ts_val b);
/* y = alpha * x + beta. */
ts_val ts_scale(ts_graph *g, ts_val x, float alpha, float beta);
/* Sums x down to `shape`, which must broadcast to x (NumPy rules): the inverse of broadcasting,
 * e.g. (N,C,H,W) -> (C,1,1) or (B,T,D) -> (D). */
ts_val ts_sum_to(ts_graph *g, ts_val x, ts_shape shape);
/* Broadcasts x up to `shape` (NumPy rules). */
ts_val ts_broadcast_to(ts_graph *g, ts_val x, ts_shape shape);
/* Reduces over the axes set in `axes_mask` (bit i = axis i; at least one axis unless x is a
 * scalar). keepdim keeps reduced axes as size 1. Max's gradient is shared equally between tied
 * maxima (like torch.amax). */
ts_val ts_reduce(ts_graph *g, ts_val x, ts_reduce_alg alg, uint32_t axes_mask, int keepdim);
ts_val ts_sum(ts_graph *g, ts_val x, uint32_t axes_mask, int keepdim);
ts_val ts_mean(ts_graph *g, ts_val x, uint32_t axes_mask, int keepdim);
ts_val ts_max(ts_graph *g, ts_val x, uint32_t axes_mask, int keepdim);
/* Reshape; one dim may be -1. Same element count. */
ts_val ts_reshape(ts_graph *g, ts_val x, ts_shape shape);
/* Flattens dims [start_dim, end] into one: (N,C,H,W) -> (N,C*H*W) for start_dim 1. */
ts_val ts_flatten(ts_graph *g, ts_val x, int start_dim);
ts_val ts_permute(ts_graph *g, ts_val x, const int *perm);
ts_val ts_transpose(ts_graph *g, ts_val x, int dim0, int dim1);
ts_val ts_concat(ts_graph *g, const ts_val *xs, int n, int axis);
/* Splits x along axis into n parts of the given sizes; writes n values to outs. */
int ts_split(ts_graph *g, ts_val x, int axis, const int64_t *sizes, int n, ts_val *outs);
ts_val ts_slice(ts_graph *g, ts_val x, int axis, int64_t start, int64_t end);
/* table (V,D), ids i32/i64 of any shape S -> (S...,D). */
ts_val ts_embedding(ts_graph *g, ts_val table, ts_val ids);
/* Vocabulary-sharded lookup (Megatron's vocab-parallel embedding): table (Vl,D) holds rows
 * [row_offset, row_offset + Vl) of the full table; an id in that range gives its row, any other
 * id >= 0 a row of zeros, so the sum of the lookups over the ranks holding the blocks (e.g.
 * ts_allreduce sum) is the full lookup. Negative ids make the run fail with TS_ERANGE;
 * row_offset < 0 is TS_EINVAL. Gradient: the scatter-add of the ids in range (at id - row_offset)
 * into a (Vl,D) table, the others ignored. No communication. */
ts_val ts_embedding_sharded(ts_graph *g, ts_val table, ts_val ids, int64_t row_offset);
/* One-hot encoding, as MindSpore's OneHot and TensorFlow's one_hot: ids i32/i64 of shape S ->
 * y of dtype dt and S's shape with a dim of `depth` inserted at `axis` (0..ndim(S); negative
 * counts from the end of y's dims, -1 the last): y is on_value where the id equals the index
 * along that dim, off_value elsewhere; an id outside [0, depth) gives a row of off_value (not an
 * error). Not differentiable (ids are integers); y is a constant of the graph for autodiff. */
ts_val ts_one_hot(ts_graph *g, ts_val ids, int64_t depth, int axis, float on_value, float off_value, ts_dtype dt);
/* Inverted dropout with drop probability p; the mask comes from Philox(seed, step, index). */
ts_val ts_dropout(ts_graph *g, ts_val x, float p, uint64_t seed);
/* Causal scaled-dot-product attention: q,k,v (B,H,T,D) -> (B,H,T,D); scale 1/sqrt(D) if 0. */
ts_val ts_attention(ts_graph *g, ts_val q, ts_val k, ts_val v, float scale);
/* The same with q,k,v laid out (B,T,H,D) (a (B,T,H*D) projection reshaped, no permutes needed)
 * -> (B,T,H,D). */
ts_val ts_attention_bthd(ts_graph *g, ts_val q, ts_val k, ts_val v, float scale);
/* The same on the packed output of one q|k|v projection: qkv (B,T,3*C), C = n_head * D, q, k, v
 * its three C-column blocks (head h = columns h*D..h*D+D-1 of each, as nanoGPT's split + view)
 * -> (B,T,C). No split, reshape or permute copies, forward or backward. */
ts_val ts_attention_qkv(ts_graph *g, ts_val qkv, int n_head, float scale);

/* ---- collectives (operator-level parallelism; docs/layout.md "Collective ops in the graph") ----
 * Ordinary differentiable ops that communicate when the plan runs. The graph holds no MPI
 * object: an op records a communicator SLOT of the plan (0..TS_GRAPH_MAX_COMM_SLOTS-1, filled with
 * ts_plan_set_comm) and the GROUP SIZE it infers shapes for. At run time the communicator in the
 * slot must have exactly group_size ranks, else the run fails (TS_EINVAL naming the op, the slot
 * and both sizes); an empty slot is an error too, except that group_size 1 runs without one, as
 * a copy. Every rank of a group must run the same collectives in the same order (as they do when
 * every rank builds the same graph).
 * Shapes are this rank's local shapes. "Rank r" is the rank within the group (the communicator's
 * ts_comm_rank; for ts_comm_grid_axis groups, the coordinate on that axis); block r of a dim of
 * length n is [r*n/g, (r+1)*n/g). Negative dims count from the end.
 * Gradients are the exact adjoints over the group: each rank's x is its own variable and the
 * objective is the SUM of every rank's loss. (So ALLREDUCE(sum)'s gradient is ALLREDUCE(sum), not
 * the identity of Megatron's convention where one replicated loss is counted once; and a value
 * replicated on the ranks, such as a weight sliced with ts_rank_slice, gets on each rank its part
 * of the gradient: the full gradient is the sum over the ranks, as data-parallel reduction makes.)
 * `op` of the reductions is a ts_reduce_op value of tessera/comm.h: TS_REDUCE_SUM 0,
 * TS_REDUCE_MEAN 1, TS_REDUCE_MAX 2, TS_REDUCE_MIN 3. Reductions take f32, bf16, f16 (16-bit types
 * accumulate in f32), i32, i64; the other ops any dtype. */

/* Before: rank r holds x_r. After: every rank holds y = op over r of x_r (same shape).
 * Gradient: sum -> ALLREDUCE(sum) of dy; mean -> ALLREDUCE(mean) of dy (dx_s = (1/g) sum_r dy_r);
 * max and min have none (ts_graph_backward fails with TS_EUNSUPPORTED naming the op). */
ts_val ts_allreduce(ts_graph *g, ts_val x, int slot, int group_size, int op);
/* Before: rank r holds x_r. After: every rank holds y = concat(x_0, ..., x_{g-1}) along dim
 * (y.shape[dim] = g * x.shape[dim]). Gradient: REDUCE_SCATTER(dim, sum) of dy (dx_r = block r
 * of sum over ranks of dy). */
ts_val ts_allgather(ts_graph *g, ts_val x, int slot, int group_size, int dim);
/* Before: rank r holds x_r (x.shape[dim] divisible by g, else TS_ESHAPE). After: rank r holds
 * block r along dim of op over s of x_s (y.shape[dim] = x.shape[dim] / g). Gradient: sum ->
 * ALLGATHER(dim) of dy; mean -> ALLGATHER(dim) of dy scaled by 1/g; max, min: none. */
ts_val ts_reduce_scatter(ts_graph *g, ts_val x, int slot, int group_size, int dim, int op);
/* Before: rank r holds x_r, cut along split_dim into g blocks (x.shape[split_dim] divisible by
 * g). After: rank r holds concat over s = 0..g-1 of (block r of x_s along split_dim), along
 * concat_dim: y.shape[split_dim] = x.shape[split_dim] / g, y.shape[concat_dim] =
 * g * x.shape[concat_dim]. The dims must differ (TS_EINVAL). Gradient: ALLTOALL(split concat_dim,
 * concat split_dim) of dy. */
ts_val ts_alltoall(ts_graph *g, ts_val x, int slot, int group_size, int split_dim, int concat_dim);
/* Before: rank r holds x_r (typically the same on every rank; x.shape[dim] divisible by g).
 * After: rank r holds block r of x_r along dim. Local, no communication (the rank comes from the
 * slot's communicator at run time). Gradient: dy placed at block r of zeros of x's shape (op
 * rank_slice_bwd, itself differentiable). */
ts_val ts_rank_slice(ts_graph *g, ts_val x, int slot, int group_size, int dim);
/* Halo exchange along dim (a spatially cut convolution's input): rank r's y is, along dim, the
 * last `lo` rows of rank r-1's x, then x, then the first `hi` rows of rank r+1's x (zeros where
 * there is no such rank: the global edges, as zero padding). y.shape[dim] = x.shape[dim] + lo + hi;
 * lo, hi in 0..x.shape[dim] (TS_ESHAPE otherwise). Gradient: HALO_BWD, dy's middle plus the
 * gradients of x's rows that the neighbours read, sent back to this rank (itself differentiable,
 * its adjoint is HALO). */
ts_val ts_halo(ts_graph *g, ts_val x, int slot, int group_size, int dim, int lo, int hi);
/* Ring attention (context parallelism): causal scaled-dot-product attention, as ts_attention
 * (layout 0: q, k, v (B,H,T,D)) or ts_attention_bthd (layout 1: (B,T,H,D)), over a sequence of
 * N T rows cut across the N = group_size ranks of slot's communicator: each rank gives its T rows
 * of q, k and v and gets its rows of the output (and the f32 log-sum-exp (B,H,T), the second
 * output). zigzag 0: rank r holds global rows [rT, (r+1)T); 1: the rows of chunks r and 2N-1-r of
 * 2N chunks of T/2 (T even): under the causal mask every rank then has the same work; 2: rows as
 * 0 given and returned, the op exchanges the half-chunks into 1's order and back (the work
 * balanced for a half-chunk of q, k, v and of o moved each way; backward likewise). The key
 * and value blocks pass around the ring (rank r sends to r+1), each exchange overlapped with the
 * attention of the block in hand (online softmax: the blocks' partial outputs merged by their
 * log-sum-exps); scale 0 means 1/sqrt(D). Gradient: RING_ATTENTION_BWD, whose key/value
 * gradients travel with their blocks and end on their owner. N 1 is ts_attention. */
ts_val ts_ring_attention(ts_graph *g, ts_val q, ts_val k, ts_val v, float scale, int layout, int slot, int group_size,
                         int zigzag);
/* Point to point, the cut edges of pipeline stages (src/parallel/stage.c builds them):
 * ts_send: x goes to rank `peer` of the communicator in plan slot `slot` with message `tag` (a
 * copy, sent without blocking); returns a token (scalar f32 0) for the stage's objective to sum,
 * so autodiff reaches it; its gradient receives dx from the peer on tag + 1.
 * ts_recv: y (dt, shape) from `peer` on `tag`, blocking; dep (TS_NONE or any value) only orders
 * it after dep. Not differentiable by itself: the stage cut sends dy back on tag + 1. */
ts_val ts_send(ts_graph *g, ts_val x, int slot, int peer, int tag);
ts_val ts_recv(ts_graph *g, ts_val dep, int slot, int peer, int tag, ts_dtype dt, ts_shape shape);

/* ---- operator-level parallelism ----
 * The shard strategy of the operator that produced v, as MindSpore's `op.shard(...)`:
 *   ts_val h = ts_matmul(g, x, w, 0, 0);  ts_shard(g, h, "((1,1),(1,2))");
 * Only recorded here; the parallel pass (parallel/parallel.h) reads it under semi_auto_parallel,
 * in preference to a strategy set's entry for the same operator, and checks it then. TS_EINVAL
 * if v is a leaf (input, parameter, constant) or not a value of g. */
int ts_shard(ts_graph *g, ts_val v, const char *strategy);

/* ---- autodiff ----
 * Appends the backward of scalar `loss` to the graph: d loss/d v for every float value v that
 * `loss` depends on through float ops. Gradients of values used several times are summed.
 * Integer values get none. Afterwards ts_graph_grad() returns the gradient of a value (TS_NONE
 * if it has none). `dloss` scales the seed gradient (1 for plain training; the loss scale for
 * mixed precision). */
int ts_graph_backward(ts_graph *g, ts_val loss, float dloss);
ts_val ts_graph_grad(const ts_graph *g, ts_val v);
/* Float inputs and params get gradients by default; turn that off for data inputs (saves the
 * backward-data work of the first layer) or frozen parameters. Call before ts_graph_backward. */
void ts_val_set_requires_grad(ts_graph *g, ts_val v, int requires);

/* ---- mixed precision (docs/mixed-precision.md) ---- */
/* MindSpore's amp levels: O0 f32; O1 matmul, dense, conv2d and attention in `low`; O2 the whole
 * network in `low` except softmax/log-softmax, the loss and reductions (f32), batch/layer norm
 * with f32 gamma/beta and statistics; O3 everything in `low`. */
typedef enum { TS_AMP_O0 = 0, TS_AMP_O1 = 1, TS_AMP_O2 = 2, TS_AMP_O3 = 3 } ts_amp_level;
/* A pass run on a forward graph before ts_graph_backward (and before the parallel pass, stage
 * cuts and recompute): g is rewritten in place so that each op runs in the dtype of its class at
 * `level` (`low` is TS_BF16 or TS_F16), with CAST nodes inserted where a float input arrives in
 * another dtype (a temporary cast once per dtype, a leaf once per consumer; casts back to a
 * value's 16-bit original folded away). Parameters, inputs and state keep their dtype (f32
 * masters: their casts differentiate into f32 gradients). Node names, attributes, strategies and
 * parameter ids are kept; handles into g from before the call are invalid except the nvals given
 * in vals[], which are remapped (a 16-bit one, e.g. logits, is cast back to f32 first). O0 does
 * nothing. TS_EINVAL/TS_EDTYPE for a bad level or dtype, TS_EGRAPH after backward. */
int ts_graph_amp(ts_graph *g, int level, ts_dtype low, ts_val *vals, int nvals);

/* ---- recomputation (activation checkpointing; docs/memory.md) ---- */
typedef enum {
  TS_RECOMPUTE_NONE = 0,      /* keep every activation backward reads */
  TS_RECOMPUTE_FULL = 1,      /* recompute every op of the segments (PyTorch checkpoint) */
  TS_RECOMPUTE_SELECTIVE = 2, /* only cheap ops: elementwise, softmax, dropout, layernorm, views */
  /* a flag or'ed into any mode: the all-gathers of activations (sequence parallelism's gathers
   * of the sequence) are gathered again in backward, not kept (Megatron's sequence parallel) */
  TS_RECOMPUTE_REGATHER = 16,
} ts_recompute_mode;
/* A pass run after ts_graph_backward and before planning: each backward node that reads an
 * activation produced inside a recompute segment reads instead a copy re-emitted (same op and
 * attributes, marked backward) just before the first backward node that needs it, from the
 * segment's inputs, so the planner frees the forward original after its last forward use.
 * Segments: patterns[0..npat-1] ("transformer.h.*": '*' matches one name part) match a node
 * when they match the first parts of its op key (scopes joined by '.' and the op); the matched
 * prefix is the node's segment. npat 0: every forward node, each in the segment named by its key
 * up to the first all-digit part ("transformer.h.0"; the rest of the model is one segment).
 * Values read by a forward node of another segment are checkpoints and stay. Never recomputed:
 * batch-norm (running statistics are updated once), the loss, pipeline sends and receives, ops
 * reading persistent state, and all-reduces, reduce-scatters and all-to-alls but under
 * TS_RECOMPUTE_FULL (which reruns a segment's forward whole, as Megatron's full recomputation
 * does, its tensor-parallel all-reduces included); all-gathers are cheap (selective redoes them);
 * dropout is recomputed (its mask is keyed by its attributes and the step). Copies run
 * the same kernels on the same inputs, so results are bitwise those without the pass.
 * At every mode (TS_RECOMPUTE_NONE included) values made from parameters alone by cheap ops (the
 * 16-bit casts of mixed precision, reshapes, splits, slices, broadcasts of weights) are made
 * again before their first backward reader, not kept from forward: the weights' 16-bit copies
 * live one layer at a time, as where the parameters themselves are 16-bit (Megatron, DeepSpeed).
 * TS_EINVAL for a bad mode or list, TS_EGRAPH before backward (but for TS_RECOMPUTE_NONE, then
 * nothing is done), TS_ENOTFOUND naming a pattern that matches no operator (recorded on the
 * graph; patterns are not read at TS_RECOMPUTE_NONE). */
int ts_graph_recompute(ts_graph *g, const char *const *patterns, int npat, int mode);

#ifdef __cplusplus
}
#endif

#endif
