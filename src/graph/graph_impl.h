/* Internal view of the graph IR: for src/graph/ only. Everything else reads and builds graphs
 * through tessera/graph.h and graph/graph_ir.h. */
#ifndef TS_GRAPH_IMPL_H
#define TS_GRAPH_IMPL_H

#include "graph_ir.h"
#include "tessera/graph.h"

typedef struct {
  ts_dtype dtype;
  ts_shape shape; /* per-rank (local) shape: what kernels see */
  ts_val_kind kind;
  int producer; /* node index, -1 for leaves */
  int out_index;
  int param_id; /* for PARAM/STATE values, index in the ts_params store; else -1 */
  int alias_of; /* value index this one is a view of (RESHAPE), else -1 */
  int no_grad;  /* 1 if no gradient flows through (integers, stop-gradient) */
  char *name;
} ts__value;

typedef struct {
  ts_op op;
  int nin, nout;
  int in[TS_GRAPH_MAX_IO];  /* value indices (local, not tagged) */
  int out[TS_GRAPH_MAX_IO];
  ts_attrs a;
  char *name;
  int is_backward; /* emitted by autodiff */
  char *strategy;  /* shard strategy text given with ts_shard (read by the parallel pass), or NULL */
} ts__node;

struct ts_graph {
  uint32_t id; /* tag in the high bits of ts_val handles */
  ts__value *vals;
  int nvals, cap_vals;
  ts__node *nodes;
  int nnodes, cap_nodes;
  int status;
  char errmsg[512];
  int training;
  int bn_sync; /* communicator slot + 1 recorded in batch-norm ops built now (0: local statistics) */
  char scope[TS_GRAPH_MAX_SCOPE];
  int *grad; /* value index -> gradient value index, -1 none (after backward) */
  int grad_len;
  int *pleaf; /* parameter-store id -> its first leaf value index, -1 none (ts_graph_param_leaf) */
  int npleaf, pleaf_upto; /* the ids covered; the values scanned so far */
};

/* Value handles: (graph id << 20) | index. */
#define TS__VAL_BITS 20
static inline ts_val ts__handle(const ts_graph *g, int idx) {
  return (ts_val)(((int32_t)(g->id & 0x3ff) << TS__VAL_BITS) | idx);
}
/* Returns the value index of handle v in g, or -1 (and records an error naming `op`). */
int ts__vidx(ts_graph *g, ts_val v, const char *op);
static inline ts__value *ts__val(const ts_graph *g, int idx) { return &g->vals[idx]; }

/* Shape inference for a node about to be added: given inputs and attrs, fills the output
 * dtypes/shapes. Returns TS_OK or an error via ts__graph_fail. */
typedef int (*ts__infer_fn)(ts_graph *g, ts__node *n, ts_dtype *odt, ts_shape *osh);
/* Gradient rule: given node n and the gradients of its outputs (dy[k] value index or -1),
 * emits ops and writes the gradient of each input to dx[k] (or -1). */
typedef int (*ts__grad_fn)(ts_graph *g, int node, const int *dy, int *dx);

typedef struct {
  const char *name;
  ts__infer_fn infer;
  ts__grad_fn grad; /* NULL: not differentiable (gradient stops) */
  int view;         /* 1: output 0 aliases input 0 (no copy; e.g. RESHAPE) */
} ts__opdef;

extern ts__opdef ts__ops[TS_OP_COUNT];
/* The value indices of q, k, v (in[3]) for a builder of attention (op names it in errors), and
 * the scale: 0 becomes 1/sqrt(head dim). -1 after failing (the graph's status set). */
int ts__attention_inputs(ts_graph *g, ts_val q, ts_val k, ts_val v, const char *op, int *in, float *scale);

/* Each family file fills its ops' entries: void ts__register_<family>(ts__opdef *tab). */
void ts__ops_init(void);

/* Records the sticky error (first wins); returns code. Message gets the node name prefix. */
int ts__graph_fail(ts_graph *g, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Adds a value (a leaf unless a node's output is recorded on it): name scoped by g's scope. Returns
 * its index or -1 (sticky error set). */
int ts__new_value(ts_graph *g, ts_dtype dt, ts_shape sh, ts_val_kind kind, const char *name);
/* Adds a node: runs the op's shape inference, creates outputs, returns the index of the node
 * or -1 on error (sticky error set). `ins` are value indices. */
int ts__add_node(ts_graph *g, ts_op op, const int *ins, int nin, int nout, const ts_attrs *a);
/* Convenience: add node and return handle of output k (TS_NONE on failure). */
ts_val ts__add1(ts_graph *g, ts_op op, const int *ins, int nin, const ts_attrs *a);
/* Like ts__add_node for single-output ops but returns the output VALUE INDEX (-1 on error);
 * used inside gradient rules, which work with indices. */
int ts__emit(ts_graph *g, ts_op op, const int *ins, int nin, const ts_attrs *a);
/* The node index that produced value index v (or -1). */
static inline int ts__producer(const ts_graph *g, int v) { return g->vals[v].producer; }
/* Emits a CONST/SCALE/etc. helpers used by gradient rules (value indices). */
int ts__emit_sum_to(ts_graph *g, int x, const ts_shape *shape);
int ts__emit_reshape(ts_graph *g, int x, const ts_shape *shape);
int ts__emit_add(ts_graph *g, int a, int b);
/* Dtype rule of the float ops (f32, bf16, f16): the values vals[0..n) (roles names[k], e.g. "x",
 * "w") must all have one float dtype, written to *dt. Fails with TS_EDTYPE naming the op, both
 * values and their dtypes otherwise (a mixed-dtype op needs an explicit ts_cast). */
int ts__same_float(ts_graph *g, const char *op, const int *vals, const char *const *names, int n,
                   ts_dtype *dt);
/* Short printable form of a value for messages: "x(64,784):f32". */
const char *ts__vstr(const ts_graph *g, int v, char *buf, size_t cap);

#endif
