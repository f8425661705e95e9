/* Internal (not installed): the graph IR, read side: op attributes, reading nodes and values, and adding a node of
 * any kind. For passes and executors that walk a graph (the
 * runtime, the parallel pass, tools); models use the builders of graph.h.
 *
 * Nodes are numbered 0..ts_graph_num_nodes-1 in order of addition (a node's inputs come before
 * it). Values are numbered 0..ts_graph_num_values-1; ts_graph_value / ts_graph_value_index
 * convert between such an index and the ts_val handle the builders use. The functions below
 * that take a node or value index expect a valid one (they do not check, like array access). */
#ifndef TS_GRAPH_GRAPH_IR_H
#define TS_GRAPH_GRAPH_IR_H

#include "tessera/graph.h"
#include "tessera/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Inputs and outputs a node may have. */
#define TS_GRAPH_MAX_IO 16

/* ---- op attributes ----
 * A node's attributes. Read and write them through the accessors generated from the A(...)
 * lines of tessera/ops.def, never by position:
 *   ts_attrs a = {0};
 *   ts_attr_set_softmax_ce_smoothing(&a, 0.1f);
 *   int64_t ignore = ts_attr_softmax_ce_ignore(ts_graph_node_attrs(g, node)); */
#define TS_ATTRS_MAX_I 16
#define TS_ATTRS_MAX_F 4
typedef struct {
  int64_t i[TS_ATTRS_MAX_I];
  float f[TS_ATTRS_MAX_F];
} ts_attrs;

#define TS__ATTR_i(grp, nm, idx)                                                                   \
  static inline int64_t ts_attr_##grp##_##nm(const ts_attrs *a) { return a->i[idx]; }             \
  static inline void ts_attr_set_##grp##_##nm(ts_attrs *a, int64_t v) { a->i[idx] = v; }
#define TS__ATTR_f(grp, nm, idx)                                                                   \
  static inline float ts_attr_##grp##_##nm(const ts_attrs *a) { return a->f[idx]; }               \
  static inline void ts_attr_set_##grp##_##nm(ts_attrs *a, float v) { a->f[idx] = v; }
/* A shape: the getter returns ndim as stored (callers validate it) and at most TS_MAX_DIMS dims;
 * the setter stores s->ndim (0..TS_MAX_DIMS) dims. */
#define TS__ATTR_shape(grp, nm, idx)                                                               \
  static inline ts_shape ts_attr_##grp##_##nm(const ts_attrs *a) {                                 \
    ts_shape s;                                                                                    \
    s.ndim = (int)a->i[idx];                                                                       \
    for (int d = 0; d < TS_MAX_DIMS; d++) s.dims[d] = d < s.ndim ? a->i[(idx) + 1 + d] : 0;        \
    return s;                                                                                      \
  }                                                                                                \
  static inline void ts_attr_set_##grp##_##nm(ts_attrs *a, const ts_shape *s) {                    \
    a->i[idx] = s->ndim;                                                                           \
    for (int d = 0; d < s->ndim && d < TS_MAX_DIMS; d++) a->i[(idx) + 1 + d] = s->dims[d];         \
  }
#define TS__ATTR_ivec(grp, nm, idx)                                                                \
  static inline int64_t ts_attr_##grp##_##nm(const ts_attrs *a, int k) { return a->i[(idx) + k]; } \
  static inline void ts_attr_set_##grp##_##nm(ts_attrs *a, int k, int64_t v) { a->i[(idx) + k] = v; }
#define A(grp, nm, kind, idx) TS__ATTR_##kind(grp, nm, idx)
#include "tessera/ops.def"
#undef A

/* DROPOUT: where run k of a slice starts in the mask's global numbering (offset, run, stride,
 * group, gstride: src/graph/op_dropout.c), for every backend's adapter. */
static inline uint64_t ts_attr_dropout_run_at(const ts_attrs *a, uint64_t k) {
  uint64_t grp = (uint64_t)ts_attr_dropout_group(a), st = (uint64_t)ts_attr_dropout_stride(a);
  return (uint64_t)ts_attr_dropout_offset(a) + (grp ? (k / grp) * (uint64_t)ts_attr_dropout_gstride(a) + (k % grp) * st : k * st);
}

/* ---- reading a graph ---- */
/* The handle of value index `index` (0..ts_graph_num_values-1), TS_NONE if out of range. */
ts_val ts_graph_value(const ts_graph *g, int index);
/* The index of value v of g, or -1 if v is not a value of g (no error recorded). */
int ts_graph_value_index(const ts_graph *g, ts_val v);

/* Node `node`'s op kind. */
ts_op ts_graph_node_op(const ts_graph *g, int node);
/* How many inputs the node has (0..TS_GRAPH_MAX_IO). */
int ts_graph_node_num_inputs(const ts_graph *g, int node);
/* The value index of the node's input k (k < its input count). */
int ts_graph_node_input(const ts_graph *g, int node, int k);
/* How many outputs the node has (1..TS_GRAPH_MAX_IO). */
int ts_graph_node_num_outputs(const ts_graph *g, int node);
/* The value index of the node's output k (k < its output count). */
int ts_graph_node_output(const ts_graph *g, int node, int k);
/* The node's attributes (read them with the ts_attr_* accessors); valid until the graph grows. */
const ts_attrs *ts_graph_node_attrs(const ts_graph *g, int node);
/* The node's name ("layer1/conv2d_3"); owned by the graph. */
const char *ts_graph_node_name(const ts_graph *g, int node);
/* 1 if the node was emitted by ts_graph_backward. */
int ts_graph_node_is_backward(const ts_graph *g, int node);
/* The strategy text given with ts_shard for this node, or NULL. */
const char *ts_graph_node_strategy(const ts_graph *g, int node);
/* Floating-point operations node `node` performs (GEMM, convolution and attention families,
 * forward and backward; 0 for ops not counted). */
double ts_graph_node_flops(const ts_graph *g, int node);
/* Renames node `node` (passes that copy nodes between graphs keep their names). */
int ts_graph_set_node_name(ts_graph *g, int node, const char *name);
/* The op kind's name ("matmul"). */
const char *ts_op_name(ts_op op);

/* Value index v's kind (input, parameter, state, or produced by a node). */
ts_val_kind ts_graph_value_kind(const ts_graph *g, int v);
/* Value index v's dtype. */
ts_dtype ts_graph_value_dtype(const ts_graph *g, int v);
/* Value index v's shape (this rank's local shape); valid until the graph grows. */
const ts_shape *ts_graph_value_shape(const ts_graph *g, int v);
/* The node that produces value index v, -1 for leaves. */
int ts_graph_value_producer(const ts_graph *g, int v);
/* The parameter-store id of a PARAM/STATE value index v, else -1. */
int ts_graph_value_param_id(const ts_graph *g, int v);
/* The first leaf value index (in index order) whose parameter-store id is param_id, else -1:
 * amortised constant time (the values added since the last call are scanned once); -1 also when
 * out of memory. */
int ts_graph_param_leaf(ts_graph *g, int param_id);
/* The value index v is a view of (output of a view op such as RESHAPE), else -1. */
int ts_graph_value_alias_of(const ts_graph *g, int v);
/* Value index v's name (leaves; scoped), or NULL; owned by the graph. */
const char *ts_graph_value_name(const ts_graph *g, int v);
/* 0 if no gradient flows through value index v (integers, ts_val_set_requires_grad(.., 0)). */
int ts_graph_value_requires_grad(const ts_graph *g, int v);
/* The graph's training flag (ts_graph_set_training). */
int ts_graph_training(const ts_graph *g);
/* The name scope in force (ts_graph_push_scope), "" if none. */
const char *ts_graph_scope(const ts_graph *g);
/* Replaces the whole name scope ("" clears it; longer than TS_GRAPH_MAX_SCOPE-1 bytes is cut);
 * for code that saves and restores it. */
#define TS_GRAPH_MAX_SCOPE 256
void ts_graph_set_scope(ts_graph *g, const char *scope);

/* ---- building ----
 * Adds a node of any op kind with inputs `ins` (value indices), `nout` outputs and attributes
 * `a` (NULL: all zero): runs the op's shape inference and creates the outputs. Returns the
 * node's index, or -1 with the graph's sticky error set (and nothing added). */
int ts_graph_add_node(ts_graph *g, ts_op op, const int *ins, int nin, int nout, const ts_attrs *a);
/* Records error `code` with a printf-style message on g (the first error wins, as for the
 * builders) and in the thread's last error; returns code. */
int ts_graph_fail(ts_graph *g, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The mixed-precision pass (ts_graph_amp) with flags. TS__AMP_PARAMS_LOW: the trainable
 * parameters (f32 TS_VAL_PARAM leaves) get leaves of dtype `low` instead of f32 masters cast per
 * use: the low ops read them directly, f32 ops through a widening cast (one per consumer), and
 * autodiff gives them `low` gradients; the caller binds 16-bit memory to both (a store of 16-bit
 * working weights whose f32 masters the optimizer holds: ZeRO's mixed-precision layout,
 * docs/memory.md). Levels O2 and O3 only (TS_EINVAL below: f32 ops would read rounded weights). */
enum { TS__AMP_PARAMS_LOW = 1 };
int ts__graph_amp_ex(ts_graph *g, int level, ts_dtype low, int flags, ts_val *vals, int nvals);

#ifdef __cplusplus
}
#endif
/* Writes into a parameter store still in flight (ZeRO's all-gathers of the updated parameters,
 * overlapped with the next forward): fn(user) is called once, before ts_params_data or
 * ts_params_ptr next hands out the parameters, and must complete them (and record any failure
 * for its owner to report). fn NULL disarms. The plans bound to the store read it directly and
 * wait for what they read themselves. */
void ts__params_set_settle(ts_params *p, void (*fn)(void *user), void *user);

#endif
