/* Executor adapters for the shape family (attribute layouts: src/graph/op_shape.c). */
#include <string.h>

#include "graph/graph_ir.h"
#include "run_impl.h"
#include "../kernels/shape.h"

/* outer = prod dims[0..axis), inner = prod dims(axis..ndim). */
static int run_reshape(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  /* a view: the planner normally aliases out to in; copy when it could not */
  if (out[0].data == in[0].data) return TS_OK;
  return ts__copy_ref(in[0].data, out[0].data, ts_tensor_nbytes(&in[0]));
}

static int run_permute(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int perm[TS_MAX_DIMS];
  for (int k = 0; k < in[0].shape.ndim; k++) perm[k] = (int)ts_attr_permute_perm(&n->a, k);
  return ts__permute_ref(in[0].data, out[0].data, ts_dtype_size(in[0].dtype), in[0].shape.ndim,
                         in[0].shape.dims, perm);
}

static int run_concat(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int axis = (int)ts_attr_concat_axis(&n->a);
  int64_t outer, inner, lens[TS_GRAPH_MAX_IO];
  const void *xs[TS_GRAPH_MAX_IO];
  ts__outer_inner(&out[0].shape, axis, &outer, &inner);
  for (int k = 0; k < n->nin; k++) {
    xs[k] = in[k].data;
    lens[k] = in[k].shape.dims[axis];
  }
  return ts__concat_ref(xs, lens, n->nin, out[0].data, ts_dtype_size(out[0].dtype), outer, inner);
}

static int run_split(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int axis = (int)ts_attr_split_axis(&n->a);
  int64_t outer, inner, lens[TS_GRAPH_MAX_IO];
  void *ys[TS_GRAPH_MAX_IO];
  ts__outer_inner(&in[0].shape, axis, &outer, &inner);
  for (int k = 0; k < n->nout; k++) {
    ys[k] = out[k].data;
    lens[k] = out[k].shape.dims[axis];
  }
  return ts__split_ref(in[0].data, ys, lens, n->nout, ts_dtype_size(in[0].dtype), outer, inner);
}

static int run_slice(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int axis = (int)ts_attr_slice_axis(&n->a);
  int64_t outer, inner;
  ts__outer_inner(&in[0].shape, axis, &outer, &inner);
  return ts__slice_ref(in[0].data, out[0].data, ts_dtype_size(in[0].dtype), outer,
                       in[0].shape.dims[axis], inner, ts_attr_slice_start(&n->a), ts_attr_slice_end(&n->a));
}

static int run_slice_bwd(ts__runctx *ctx, const ts__run_node *n, const ts_tensor *in, ts_tensor *out) {
  int axis = (int)ts_attr_slice_axis(&n->a);
  int64_t outer, inner;
  ts__outer_inner(&out[0].shape, axis, &outer, &inner);
  return ts__slice_bwd_ref(in[0].data, out[0].data, ts_dtype_size(out[0].dtype), outer,
                           out[0].shape.dims[axis], inner, ts_attr_slice_start(&n->a), ts_attr_slice_end(&n->a));
}

void ts__register_run_shape(ts__run_fn *tab) {
  tab[TS_OP_RESHAPE] = run_reshape;
  tab[TS_OP_PERMUTE] = run_permute;
  tab[TS_OP_CONCAT] = run_concat;
  tab[TS_OP_SPLIT] = run_split;
  tab[TS_OP_SLICE] = run_slice;
  tab[TS_OP_SLICE_BWD] = run_slice_bwd;
}
