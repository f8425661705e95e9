/* Tessera parameter store: flat buffers with named views, and initialisers.
 *
 * All trainable parameters live in ONE flat f32 buffer and their gradients in a second one with
 * the same offsets (as in llm.c), so that gradient buckets and optimizer shards are offsets.
 * Non-trainable persistent state (BatchNorm running statistics) lives in a third flat buffer.
 * Every parameter is initialised from a counter-based RNG keyed by (seed, name) and indexed by
 * the element's global position, so any slice can be produced alone and every layout starts
 * from the same weights. An entry may hold only one rank's slice of a tensor cut by a layout
 * (include/tessera/layout.h).
 *
 * Usage (compiled by tests/tools/header_examples_test.sh):
 *   ts_params *ps; ts_params_create(&ps);
 *   // layers register entries (nn.h) and build the loss; then ts_graph_backward(g, loss, 1);
 *   ts_params_alloc(ps, seed);            // allocate + initialise
 *   int cap = ts_params_count(ps) + 1, nk = 0;
 *   ts_val *keep = malloc(sizeof *keep * (size_t)cap);
 *   ts_params_attach_grads(ps, g, keep, cap, &nk);   // every gradient a bindable buffer
 *   keep[nk++] = loss;
 *   ts_plan *plan;  ts_plan_create(g, keep, nk, &plan);   // runtime.h
 *   ts_params_bind(ps, g, plan);
 */
#ifndef TESSERA_PARAMS_H
#define TESSERA_PARAMS_H

#include "tessera/graph.h"
#include "tessera/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  TS_INIT_ZEROS = 0,
  TS_INIT_ONES,
  TS_INIT_CONST,           /* a */
  TS_INIT_UNIFORM,         /* U(a, b) */
  TS_INIT_NORMAL,          /* N(mean a, std b) */
  TS_INIT_XAVIER_UNIFORM,  /* gain a (0 -> 1) */
  TS_INIT_XAVIER_NORMAL,   /* gain a (0 -> 1) */
  TS_INIT_KAIMING_UNIFORM, /* negative slope a; fan_in mode, leaky_relu gain (PyTorch) */
  TS_INIT_KAIMING_NORMAL,  /* negative slope a; fan_in mode */
  TS_INIT_TORCH_DEFAULT,   /* PyTorch's Linear/Conv default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
  TS_INIT_TRUNC_NORMAL,    /* N(mean a, std b) truncated to [a - 2b, a + 2b] (MindSpore's and TensorFlow's
                            * TruncatedNormal), drawn by inverting the CDF of one uniform per element */
} ts_init_kind;

typedef struct {
  ts_init_kind kind;
  float a, b;
  int64_t fan_in; /* for TORCH_DEFAULT on a bias: the layer's fan_in (0 = from the shape) */
} ts_init;

/* PyTorch's fan_in/fan_out for a weight shape (out, in, k...): in*prod(k), out*prod(k). */
void ts_init_fans(ts_shape shape, int64_t *fan_in, int64_t *fan_out);
/* Fills dst with elements [begin, begin+count) (row-major global positions) of the parameter of
 * `global` shape drawn with `key` (see ts_hash_name). */
int ts_init_fill(const ts_init *init, ts_shape global, uint64_t key, float *dst, int64_t begin,
                 int64_t count);

enum { TS_PARAM_NO_DECAY = 1, TS_PARAM_STATE = 2 };

typedef struct ts_params ts_params;

int ts_params_create(ts_params **out);
void ts_params_free(ts_params *p);
/* Registers a parameter (or, with TS_PARAM_STATE, a persistent buffer); returns its id (>= 0) or
 * a negative status (duplicate name, bad shape, or after alloc). */
int ts_params_add(ts_params *p, const char *name, ts_shape shape, ts_init init, int flags);
/* Registers a SHARDED parameter (or, with TS_PARAM_STATE, persistent buffer): the store holds
 * only `rank`'s slice of a tensor of shape `global_shape` cut by `layout` (see layout.h). The
 * entry's shape (ts_params_shape, the flat-buffer size, graph binding, by-name reuse in
 * ts_nn_param) is the LOCAL shape (ts_layout_local_shape); the global shape, a copy of the layout
 * and the rank are remembered. ts_params_alloc fills the slice with exactly the values the
 * unsharded parameter of the same name, init and seed has at the slice's global positions, so
 * initialisation does not depend on the layout. Returns the id (>= 0) or a negative status whose
 * message names the parameter, the layout and the global shape: TS_EINVAL for an empty/duplicate
 * name, a call after alloc, a NULL or invalid layout, a layout with a partial mask (a parameter
 * is never a partial sum) or a rank outside the device matrix; TS_ESHAPE for a non-positive
 * dimension, a layout whose number of dims differs from the shape's or a cut dimension that is
 * not divisible by its cut. */
int ts_params_add_sharded(ts_params *p, const char *name, ts_shape global_shape,
                          const ts_layout *layout, int rank, ts_init init, int flags);
/* The initialiser an entry was registered with. */
ts_init ts_params_init_of(const ts_params *p, int id);
/* A sharded entry whose global shape is a reshaped form of the parameter's own shape (the
 * parallel pass holds GPT's fused (3C,C) q|k|v weight as (3,C,C) to cut it by heads): `shape`
 * (same element count) is the parameter's own shape, the one its initialiser's fans and
 * checkpoints use. TS_EINVAL for an unsharded entry, TS_ESHAPE for another element count. */
int ts_params_set_init_shape(ts_params *p, int id, ts_shape shape);
/* The parameter's own shape (ts_params_set_init_shape; else its global shape). */
ts_shape ts_params_init_shape(const ts_params *p, int id);
/* Allocates the flat buffers and initialises every entry with `seed`. */
int ts_params_alloc(ts_params *p, uint64_t seed);
/* Fixes the store's layout as ts_params_alloc would (entries, offsets, counts; nothing can be
 * added after) without allocating or initialising anything: a store for planning a job on paper
 * (a 1-trillion-parameter model's shapes and counts, not its bytes). Every buffer and entry
 * pointer is NULL; ts_params_each_binding gives every value NULL memory (ts_params_bind into a
 * dry plan, runtime.h, records the bindings without memory). ts_params_alloc on it is refused. */
int ts_params_alloc_dry(ts_params *p);
/* 1 for a store laid out by ts_params_alloc_dry. */
int ts_params_is_dry(const ts_params *p);
/* As ts_params_alloc, but without the trainable parameters' flat buffer: for a layout that holds
 * the parameters elsewhere (ZeRO-3: each rank keeps its shard, src/distribution/dist_zero.c). Gradients
 * and states are allocated and the states initialised; ts_params_data and ts_params_ptr of a
 * trainable entry are NULL, and ts_params_each_binding gives parameter values NULL memory. The
 * initial values come from ts_params_fill. TS_EINVAL on a store already allocated with its
 * parameters (and ts_params_alloc on one allocated without). */
int ts_params_alloc_external(ts_params *p, uint64_t seed);
/* Before allocation: external = 1 makes the store allocate no gradient buffer, for a layout that
 * places each gradient elsewhere (ZeRO stages 2 and 3: the gradient buckets' staging slots,
 * src/distribution/dist_zero.c). ts_params_grads and ts_params_grad_ptr are then NULL and
 * ts_params_each_binding gives gradient values NULL memory (the caller binds them). TS_EINVAL
 * once allocated. */
int ts_params_set_grads_external(ts_params *p, int external);
/* Elements [begin, begin + count) of entry id's initial values with `seed` (its local row-major
 * order) into dst: exactly what ts_params_alloc puts there. A sharded entry (a slice) only as a
 * whole. TS_EINVAL for a bad id, TS_ERANGE for a range outside the entry, naming it. */
int ts_params_fill(const ts_params *p, int id, uint64_t seed, int64_t begin, int64_t count, float *dst);
int ts_params_count(const ts_params *p);
int ts_params_find(const ts_params *p, const char *name); /* id or -1 */
const char *ts_params_name(const ts_params *p, int id);
ts_shape ts_params_shape(const ts_params *p, int id);
int ts_params_flags(const ts_params *p, int id);
/* The full tensor's shape: the global shape given to ts_params_add_sharded, or the entry's shape
 * for an unsharded entry (zero-dim shape for an invalid id). */
ts_shape ts_params_global_shape(const ts_params *p, int id);
/* 1 if the entry was registered with ts_params_add_sharded, else 0 (also for an invalid id). */
int ts_params_is_sharded(const ts_params *p, int id);
/* The layout of a sharded entry (the store's copy, valid while p lives); NULL for unsharded
 * entries and invalid ids. */
const ts_layout *ts_params_layout(const ts_params *p, int id);
/* The rank whose slice a sharded entry holds; -1 for unsharded entries and invalid ids. */
int ts_params_shard_rank(const ts_params *p, int id);
/* Offset (elements) of an entry in its flat buffer (params or states). */
size_t ts_params_offset(const ts_params *p, int id);
/* The entry's data (in the param or state buffer) and, for trainable ones, its gradient (NULL
 * without a gradient buffer: ts_params_set_grads_external). */
float *ts_params_ptr(ts_params *p, int id);
float *ts_params_grad_ptr(ts_params *p, int id);
/* Flat buffers. */
float *ts_params_data(ts_params *p);
float *ts_params_grads(ts_params *p);
float *ts_params_states(ts_params *p);
size_t ts_params_numel(const ts_params *p);       /* trainable elements */
size_t ts_params_state_numel(const ts_params *p); /* state elements */
/* After ts_graph_backward: makes each parameter's gradient its own materialised value (emitting
 * a COPY where the gradient is a view or shared) and records it; parameters that get no gradient
 * keep a zero gradient. A store may serve several graphs reading disjoint parameters (a pipeline
 * rank's pieces): attaching g redoes only the attachments made in g. Returns the gradient values in `keep` (up to cap) for ts_plan_create. */
int ts_params_attach_grads(ts_params *p, ts_graph *g, ts_val *keep, int cap, int *nkeep);
/* The gradient value attached for parameter `id` (TS_NONE if it gets no gradient). */
ts_val ts_params_grad_value(const ts_params *p, int id);
/* Calls fn(value, memory, user) for every param/state value of g with the memory it lives in
 * (the flat buffers), and, if g is the graph passed to ts_params_attach_grads, for every attached
 * gradient with its place in the gradient buffer; stops at the first non-zero return. Checks
 * that each value matches its entry (TS_EINVAL / TS_ESHAPE naming both). The runtime binds a
 * plan through it (ts_params_bind in runtime.h). */
typedef int (*ts_params_binding_fn)(ts_val v, void *data, void *user);
int ts_params_each_binding(ts_params *p, const ts_graph *g, ts_params_binding_fn fn, void *user);

/* part[r] for r < nranks: the piece of the partition rank r is in (ranks holding the same slice
 * of parameter id share it; an unsharded entry: every rank in piece 0); returns the number of
 * pieces or a negative status (TS_EINVAL for a layout on another number of devices). */
int ts_params_rank_partition(const ts_params *p, int id, int nranks, int *part);
/* How many of the nranks ranks hold the same slice of parameter id as rank `rank` (nranks for an
 * unsharded entry): the group its gradient is reduced over. A negative status as for
 * ts_params_rank_partition (and TS_EINVAL for a rank outside 0..nranks-1). */
int ts_params_holders(const ts_params *p, int id, int nranks, int rank);

#ifdef __cplusplus
}
#endif
#endif
